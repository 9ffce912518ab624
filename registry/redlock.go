package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// NewRedlock returns a registry whose locks live on a majority of
// independent Redis masters, one Client each (the Redlock algorithm): an
// obtain runs on every node in parallel, each bounded by a short node
// timeout (the acquisition's TTL/100, at least 50ms, at most the command
// timeout),
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
	if err := checkNodes(clients); err != nil {
		return nil, err
	}
	// The options are checked before the registry key, as they always were.
	if cfg, err := newConfig(opts); err != nil {
		return nil, err
	} else if cfg.ackReplicas > 0 {
		return nil, fmt.Errorf("%w: WithReplicaAck does not apply to Redlock nodes", ErrInvalidConfig)
	}
	return build(registryKey, opts, func(cfg config, s scripts, st *stats) (store, error) {
		return &quorumStore{
			nodes:       append([]Client(nil), clients...),
			s:           s,
			timeout:     cfg.commandTimeout,
			nodeTimeout: nodeTimeout(cfg.commandTimeout, cfg.expireAfter),
			stats:       st,
		}, nil
	})
}

// checkNodes checks the clients of a Redlock registry: an odd number, at
// least 3, none nil, none twice.
func checkNodes(clients []Client) error {
	n := len(clients)
	if n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: Redlock needs an odd number of nodes, at least 3; got %d", ErrInvalidConfig, n)
	}
	seen := make(map[Client]bool, n)
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: nil client %d", ErrInvalidConfig, i)
		}
		if seen[c] {
			return fmt.Errorf("%w: client %d appears twice", ErrInvalidConfig, i)
		}
		seen[c] = true
	}
	return nil
}

// nodeTimeout bounds one node's call of an acquisition that lives ttl:
// ttl/100, at least 50ms, at most the command timeout.
func nodeTimeout(commandTimeout, ttl time.Duration) time.Duration {
	return min(commandTimeout, max(50*time.Millisecond, ttl/100))
}

// quorumStore is the store of a Redlock registry: every operation runs on
// every node in parallel (quorum.go), and succeeds on a majority.
type quorumStore struct {
	nodes       []Client
	s           scripts
	timeout     time.Duration // the command timeout, for a whole operation
	nodeTimeout time.Duration // for one node's call at the registry's TTL
	stats       *stats
	next        atomic.Uint32 // the node the next subscription tries first
}

// obtain runs obtain.lua on every node. On a majority it grants the lock
// with the highest fence counter, after raising every node's counter to it
// (fencing); otherwise it releases the nodes it took and reports the
// shortest TTL of another holder, or an ErrNoQuorum error.
func (q *quorumStore) obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	g, err := q.obtainAll(ctx, lk, token, ttl, h)
	q.stats.redisError(err)
	return g, err
}

// A refused obtain sleeps as the node that says the shortest sleep, and
// takes every release message for a possible turn: each node keeps a
// queue of its own, and every node publishes.
func (q *quorumStore) obtainAll(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	var (
		v     = tally{q: q}
		won   []int
		out   = unknown
		final error
	)
	d := nodeTimeout(q.timeout, ttl) // the acquisition's TTL sets it
	for i, r := range q.evalAll(ctx, d, obtainScript, q.s.obtain(lk, token, ttl, h)) {
		g, err := decodeGrant(r.Reply)
		if r.Err != nil {
			err = r.Err
		}
		switch {
		case err != nil:
			v.fail(err)
			if !isAmbiguous(err) && !isTransient(err) {
				final = firstOf(final, err) // WRONGTYPE and the like
			}
		case g.ok:
			won = append(won, i)
			out.fence = max(out.fence, g.fence)
		case g.sleep >= 0 && (out.sleep < 0 || g.sleep < out.sleep):
			out.sleep = g.sleep
		}
	}
	v.done = len(won)
	if v.majority() && q.s.fencing {
		if err := q.raiseFence(ctx, d, lk, out.fence); err != nil {
			q.undo(ctx, d, lk, token, won)
			return unknown, err
		}
	}
	if v.majority() {
		return grant{ok: true, fence: out.fence}, nil
	}
	q.undo(ctx, d, lk, token, won)
	switch {
	case final != nil:
		return unknown, final
	case v.hopeless():
		return unknown, v.err()
	}
	return out, nil
}

// raiseFence sets the fence counter of every node to at least fence, so
// that any later majority, which shares a node with a majority that took
// it, counts above it. It fails unless a majority took it.
func (q *quorumStore) raiseFence(ctx context.Context, d time.Duration, lk string, fence int64) error {
	v := tally{q: q}
	for _, r := range q.evalAll(ctx, d, fenceScript, q.s.fence(lk, fence)) {
		if r.Err != nil {
			v.fail(r.Err)
			continue
		}
		v.done++
	}
	if !v.majority() {
		return v.err()
	}
	return nil
}

// undo releases lk on the nodes in won, where this obtain took it, best
// effort: a node that fails keeps it until its TTL. Waiters are told, as
// by any release.
func (q *quorumStore) undo(ctx context.Context, d time.Duration, lk, token string, won []int) {
	if len(won) == 0 {
		return
	}
	took := make([]bool, len(q.nodes))
	for _, i := range won {
		took[i] = true
	}
	c := q.s.release(lk, token)
	fanOut(context.WithoutCancel(ctx), q, d, func(ctx context.Context, i int, n Client) error {
		if !took[i] {
			return nil
		}
		_, err := n.Eval(ctx, releaseScript, c.Keys, c.Args)
		return err
	})
}

// pass is declined: a pass needs one node's view of the waiters.
func (q *quorumStore) pass(context.Context, string, string, time.Duration, hint, bool) (passReply, error) {
	return passReply{outcome: passDeclined}, nil
}

func (q *quorumStore) renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	return q.majorityDone(ctx, nodeTimeout(q.timeout, ttl), renewScript, q.s.renew(lk, token, ttl))
}

func (q *quorumStore) release(ctx context.Context, lk, token string) (done, others bool, err error) {
	done, err = q.majorityDone(ctx, q.nodeTimeout, releaseScript, q.s.release(lk, token))
	return done, false, err
}

// majorityDone runs s on every node, each bounded by d, and reports whether
// a majority did it.
func (q *quorumStore) majorityDone(ctx context.Context, d time.Duration, s *Script, c Call) (bool, error) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	ok, err := q.count(q.evalAll(ctx, d, s, c))
	q.stats.redisError(err)
	return ok, err
}

// renewBatch runs the batch on every node and counts each call's replies.
func (q *quorumStore) renewBatch(ctx context.Context, calls []renewCall) []renewReply {
	batch := make([]Call, len(calls))
	for i, x := range calls {
		batch[i] = q.s.renew(x.lk, x.token, x.ttl)
	}
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	per := fanOut(ctx, q, q.nodeTimeout, func(ctx context.Context, _ int, n Client) []Result {
		return n.EvalBatch(ctx, renewScript, batch)
	})
	out := make([]renewReply, len(calls))
	col := make([]Result, len(q.nodes))
	for j := range calls {
		for i := range q.nodes {
			col[i] = per[i][j]
		}
		out[j].ok, out[j].err = q.count(col)
		q.stats.redisError(out[j].err)
	}
	return out
}

// subscribe subscribes on the first node that accepts, trying them in
// turn: every release publishes on every node, so one subscription hears
// all. When it fails the registry subscribes again, on the next node.
func (q *quorumStore) subscribe(ctx context.Context) (Subscription, error) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	start := int(q.next.Add(1))
	var errs []error
	for k := range q.nodes {
		c := q.nodes[(start+k)%len(q.nodes)]
		nctx, cancel := context.WithTimeout(ctx, q.nodeTimeout)
		sub, err := c.PSubscribe(nctx, q.s.layout.ChannelPattern())
		cancel()
		if err == nil {
			return sub, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("lockyard: no Redlock node accepted the subscription: %w", errors.Join(errs...))
}

// info is not read from Redlock nodes.
func (q *quorumStore) info(context.Context, string) (string, error) { return "", errNoInfo }

// leave runs on every node, best effort: a node that misses it lets the
// entry lapse.
func (q *quorumStore) leave(ctx context.Context, lk, waiter string) error {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	var first error
	for _, r := range q.evalAll(ctx, q.nodeTimeout, leaveScript, q.s.leave(lk, waiter)) {
		if r.Err != nil && first == nil {
			first = r.Err
		}
	}
	return first
}

// nudge runs on every node, best effort: each keeps a queue of its own. A
// node whose key still lives lets its waiters poll.
func (q *quorumStore) nudge(ctx context.Context, lk, token string) (time.Duration, error) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	for _, r := range q.evalAll(ctx, q.nodeTimeout, nudgeScript, q.s.nudge(lk, token)) {
		if r.Err != nil {
			return -1, r.Err
		}
	}
	return -1, nil
}
