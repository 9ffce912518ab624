package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// nodeTimeout bounds one node's call of an acquisition that lives ttl:
// ttl/100, at least 50ms, at most the command timeout.
func nodeTimeout(commandTimeout, ttl time.Duration) time.Duration {
	return min(commandTimeout, max(50*time.Millisecond, ttl/100))
}

// quorumExec is the executor of a Redlock registry: every call runs on
// every node in parallel, and the caller tallies the replies (tally). It
// counts nothing in Stats: a Redlock operation counts once, by its outcome
// (mutexProto.count).
type quorumExec struct {
	clients []Client
	timeout time.Duration // the command timeout, for a whole call
	// nodeTimeout bounds one node's call at the registry's TTL (a call
	// with d = 0).
	nodeTimeout time.Duration
	next        atomic.Uint32 // the node the next subscription tries first
}

var _ executor = (*quorumExec)(nil)

func (q *quorumExec) nodes() int { return len(q.clients) }

// fanOut runs fn on every node of q in parallel, each with ctx bounded by
// d, and returns the results in node order.
func fanOut[T any](ctx context.Context, q *quorumExec, d time.Duration, fn func(ctx context.Context, i int, c Client) T) []T {
	if d == 0 {
		d = q.nodeTimeout
	}
	out := make([]T, len(q.clients))
	var wg sync.WaitGroup
	for i, c := range q.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			out[i] = fn(nctx, i, c)
		}()
	}
	wg.Wait()
	return out
}

func (q *quorumExec) eval(ctx context.Context, d time.Duration, s *Script, c Call) []Result {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	return fanOut(ctx, q, d, func(ctx context.Context, _ int, n Client) Result {
		v, err := n.Eval(ctx, s, c.Keys, c.Args)
		return Result{v, err}
	})
}

// evalOn runs c of s on the nodes i for which on[i] is set, each bounded
// by d; the others are not contacted (Redlock's undo).
func (q *quorumExec) evalOn(ctx context.Context, d time.Duration, s *Script, c Call, on []bool) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	fanOut(ctx, q, d, func(ctx context.Context, i int, n Client) error {
		if !on[i] {
			return nil
		}
		_, err := n.Eval(ctx, s, c.Keys, c.Args)
		return err
	})
}

func (q *quorumExec) evalBatch(ctx context.Context, d time.Duration, s *Script, calls []Call) [][]Result {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	return fanOut(ctx, q, d, func(ctx context.Context, _ int, n Client) []Result {
		return n.EvalBatch(ctx, s, calls)
	})
}

// subscribe subscribes on the first node that accepts, trying them in
// turn: every release publishes on every node, so one subscription hears
// all. When it fails the registry subscribes again, on the next node.
func (q *quorumExec) subscribe(ctx context.Context, pattern string) (Subscription, error) {
	ctx, cancel := bound(ctx, q.timeout)
	defer cancel()
	start := int(q.next.Add(1))
	var errs []error
	for k := range q.clients {
		c := q.clients[(start+k)%len(q.clients)]
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

// info is not read from Redlock nodes.
func (q *quorumExec) info(context.Context, string) (string, error) { return "", errNoInfo }

// tally counts the nodes of n that did a call and those that failed: a
// majority rule.
type tally struct {
	n            int
	done, failed int
	first        error
}

func (t *tally) fail(err error) {
	t.failed++
	t.first = firstOf(t.first, err)
}

func (t *tally) need() int      { return t.n/2 + 1 }
func (t *tally) majority() bool { return t.done >= t.need() }
func (t *tally) hopeless() bool { return t.failed > t.n-t.need() }
func (t *tally) err() error {
	return fmt.Errorf("%w: %d of %d nodes succeeded, %d failed, a majority is %d: %w",
		ErrNoQuorum, t.done, t.n, t.failed, t.need(), t.first)
}

// majorityDone combines replies of 1 (done) or 0 (key gone or another's):
// true on a majority, an ErrNoQuorum error when the failures leave no
// majority possible, else false. With one node it is that node's reply.
func majorityDone(res []Result) (bool, error) {
	if len(res) == 1 {
		return decodeDone(res[0].Reply, res[0].Err)
	}
	v := tally{n: len(res)}
	for _, r := range res {
		ok, err := decodeDone(r.Reply, r.Err)
		switch {
		case err != nil:
			v.fail(err)
		case ok:
			v.done++
		}
	}
	switch {
	case v.majority():
		return true, nil
	case v.hopeless():
		return false, v.err()
	}
	return false, nil
}

// firstOf returns first, or err if first is nil.
func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
