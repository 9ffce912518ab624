package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ErrNoQuorum means a Redlock registry could not reach a majority of its
// nodes: too many were down, slow or failing. LockContext retries it until
// its ctx ends.
var ErrNoQuorum = errors.New("lockyard: no quorum of Redis nodes")

//go:embed lua/fence.lua
var fenceSrc string

var fenceScript = newScript("fence", fenceSrc)

// NewRedlock returns a registry whose locks live on a majority of
// independent Redis masters, one Client each (the Redlock algorithm): an
// obtain runs on every node in parallel, each bounded by a short node
// timeout (expireAfter/100, at least 50ms, at most the command timeout),
// and succeeds only on a majority, within the validity time (expireAfter
// minus the time the obtain took minus the drift margin); otherwise it is
// undone on every node. Releases run on every node; renewals need a
// majority too. A registry key of one Redlock registry must not be used by
// single-node registries on the same servers.
//
// The number of clients must be odd and at least 3, with no duplicates.
// WithReplicaAck is refused: the nodes are meant to be masters without
// replicas. With WithFencing the token is the highest counter of the
// majority, which the obtain then writes to every node (a majority must
// take it), so that any later majority (which shares a node with it)
// counts above it. This holds while the nodes keep their data: a node that
// restarts empty can break it (see docs/SCALING.md for what Redlock does and does not give).
// Local hand-off among goroutines still passes a hold without a command,
// but never through the pass script.
func NewRedlock(clients []Client, registryKey string, opts ...Option) (*Registry, error) {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("%w: Redlock needs an odd number of nodes, at least 3; got %d", ErrInvalidConfig, n)
	}
	seen := make(map[Client]bool, n)
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%w: nil client %d", ErrInvalidConfig, i)
		}
		if seen[c] {
			return nil, fmt.Errorf("%w: client %d appears twice", ErrInvalidConfig, i)
		}
		seen[c] = true
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.ackReplicas > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck does not apply to Redlock nodes", ErrInvalidConfig)
	}
	q := &quorum{
		prefix:      registryKey,
		nodes:       append([]Client(nil), clients...),
		nodeTimeout: min(cfg.commandTimeout, max(50*time.Millisecond, cfg.expireAfter/100)),
	}
	opts = append(opts[:len(opts):len(opts)], func(c *config) error { c.redlock = true; return nil })
	return NewWithClient(q, registryKey, opts...)
}

// quorum is the Client of a Redlock registry: every call runs on every
// node in parallel, and the replies are combined per script.
type quorum struct {
	prefix      string // the registry key, for release channels
	nodes       []Client
	nodeTimeout time.Duration
	next        atomic.Uint32 // the node the next subscription tries first
}

func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// fanOut runs fn on every node of q in parallel, each with ctx bounded by
// the node timeout, and returns the results in node order.
func fanOut[T any](ctx context.Context, q *quorum, fn func(ctx context.Context, i int, c Client) T) []T {
	out := make([]T, len(q.nodes))
	var wg sync.WaitGroup
	for i, c := range q.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, q.nodeTimeout)
			defer cancel()
			out[i] = fn(nctx, i, c)
		}()
	}
	wg.Wait()
	return out
}

// evalAll runs s on every node.
func (q *quorum) evalAll(ctx context.Context, s *Script, keys []string, args []any) []Result {
	return fanOut(ctx, q, func(ctx context.Context, _ int, c Client) Result {
		v, err := c.Eval(ctx, s, keys, args)
		return Result{v, err}
	})
}

func (q *quorum) Eval(ctx context.Context, s *Script, keys []string, args []any) (any, error) {
	switch s {
	case obtainScript:
		return q.obtain(ctx, keys, args)
	case releaseScript, renewScript:
		return q.count(q.evalAll(ctx, s, keys, args))
	}
	return nil, fmt.Errorf("%w: the %s script does not run on Redlock", ErrInvalidConfig, s.Name())
}

// count combines replies of 1 (done) or 0 (key gone or another's): 1 on a
// majority, an ErrNoQuorum error when the failures leave no majority
// possible, else 0.
func (q *quorum) count(res []Result) (any, error) {
	done, failed, firstErr := 0, 0, error(nil)
	for _, r := range res {
		n, err := redis.Int(r.Reply, r.Err)
		switch {
		case err != nil:
			failed++
			firstErr = firstOf(firstErr, err)
		case n == 1:
			done++
		}
	}
	switch {
	case done >= q.majority():
		return int64(1), nil
	case failed > len(q.nodes)-q.majority():
		return nil, q.noQuorum(done, failed, firstErr)
	}
	return int64(0), nil
}

func (q *quorum) noQuorum(ok, failed int, err error) error {
	return fmt.Errorf("%w: %d of %d nodes succeeded, %d failed, a majority is %d: %w", ErrNoQuorum, ok, len(q.nodes), failed, q.majority(), err)
}

// firstOf returns first, or err if first is nil.
func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// obtain runs obtain.lua on every node. On a majority it returns {1, the
// highest fence counter}, after raising every node's counter to it
// (fencing); otherwise it releases the nodes it took and returns {0, the
// shortest TTL of another holder} or an ErrNoQuorum error.
func (q *quorum) obtain(ctx context.Context, keys []string, args []any) (any, error) {
	res := q.evalAll(ctx, obtainScript, keys, args)
	var (
		won             []int
		fence, pttl     int64 = 0, -1
		failed          int
		firstErr, final error
	)
	for i, r := range res {
		var ok, n int64
		v, err := redis.Values(r.Reply, r.Err)
		if err == nil {
			_, err = redis.Scan(v, &ok, &n)
		}
		switch {
		case err != nil:
			failed++
			firstErr = firstOf(firstErr, err)
			if !isAmbiguous(err) && !isTransient(err) {
				final = firstOf(final, err) // WRONGTYPE and the like
			}
		case ok == 1:
			won = append(won, i)
			fence = max(fence, n)
		case n >= 0 && (pttl < 0 || n < pttl):
			pttl = n
		}
	}
	if len(won) >= q.majority() && len(keys) == 3 { // fencing
		if err := q.raiseFence(ctx, keys[2], fence); err != nil {
			q.undo(ctx, keys[0], args[0], won)
			return nil, err
		}
	}
	if len(won) >= q.majority() {
		return []any{int64(1), fence}, nil
	}
	q.undo(ctx, keys[0], args[0], won)
	switch {
	case final != nil:
		return nil, final
	case failed > len(q.nodes)-q.majority():
		return nil, q.noQuorum(len(won), failed, firstErr)
	}
	return []any{int64(0), pttl}, nil
}

// raiseFence sets the fence counter of every node to at least fence, so
// that any later majority, which shares a node with a majority that took
// it, counts above it. It fails unless a majority took it.
func (q *quorum) raiseFence(ctx context.Context, fenceKey string, fence int64) error {
	ok, failed, firstErr := 0, 0, error(nil)
	for _, r := range q.evalAll(ctx, fenceScript, []string{fenceKey}, []any{fence}) {
		if r.Err != nil {
			failed++
			firstErr = firstOf(firstErr, r.Err)
			continue
		}
		ok++
	}
	if ok < q.majority() {
		return q.noQuorum(ok, failed, firstErr)
	}
	return nil
}

// undo releases the lock key on the nodes in won, where this obtain took
// it, best effort: a node that fails keeps it until its TTL. Waiters are
// told, as by any release.
func (q *quorum) undo(ctx context.Context, key string, token any, won []int) {
	if len(won) == 0 {
		return
	}
	took := make([]bool, len(q.nodes))
	for _, i := range won {
		took[i] = true
	}
	fanOut(context.WithoutCancel(ctx), q, func(ctx context.Context, i int, c Client) error {
		if !took[i] {
			return nil
		}
		_, err := c.Eval(ctx, releaseScript, []string{key}, []any{token, channelName(q.prefix, key)})
		return err
	})
}

// EvalWait is refused: NewRedlock does not accept WithReplicaAck.
func (q *quorum) EvalWait(context.Context, *Script, []string, []any, int, time.Duration) (any, int, error) {
	return nil, 0, fmt.Errorf("%w: WAIT does not run on Redlock", ErrInvalidConfig)
}

// EvalBatch runs the batch on every node and combines each call's replies
// as count does.
func (q *quorum) EvalBatch(ctx context.Context, s *Script, calls []Call) []Result {
	per := fanOut(ctx, q, func(ctx context.Context, _ int, c Client) []Result {
		return c.EvalBatch(ctx, s, calls)
	})
	out := make([]Result, len(calls))
	col := make([]Result, len(q.nodes))
	for j := range calls {
		for i := range q.nodes {
			col[i] = per[i][j]
		}
		out[j].Reply, out[j].Err = q.count(col)
	}
	return out
}

// PSubscribe subscribes on the first node that accepts, trying them in
// turn: every release publishes on every node, so one subscription hears
// all. When it fails the registry subscribes again, on the next node.
func (q *quorum) PSubscribe(ctx context.Context, pattern string) (Subscription, error) {
	start := int(q.next.Add(1))
	var errs []error
	for k := range q.nodes {
		c := q.nodes[(start+k)%len(q.nodes)]
		nctx, cancel := context.WithTimeout(ctx, q.nodeTimeout)
		sub, err := c.PSubscribe(nctx, pattern)
		cancel()
		if err == nil {
			return sub, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("lockyard: no Redlock node accepted the subscription: %w", errors.Join(errs...))
}
