package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// NodeTimeout bounds one node's call of an acquisition that lives ttl:
// ttl/100, at least 50ms, at most the command timeout.
func NodeTimeout(commandTimeout, ttl time.Duration) time.Duration {
	return min(commandTimeout, max(50*time.Millisecond, ttl/100))
}

// QuorumExec is the executor of a Redlock registry: every call runs on
// every node in parallel, and the caller tallies the replies (tally). It
// counts nothing in Stats: a Redlock operation counts once, by its outcome
// (mutexProto.count).
type QuorumExec struct {
	Clients []Client
	Timeout time.Duration // the command timeout, for a whole call
	// NodeTimeout bounds one node's call at the registry's TTL (a call
	// with d = 0).
	NodeTimeout time.Duration
	next        atomic.Uint32 // the node the next subscription tries first
}

var _ Executor = (*QuorumExec)(nil)

func (q *QuorumExec) Nodes() int { return len(q.Clients) }

// fanOut runs fn on every node of q in parallel, each with ctx bounded by
// d, and returns the results in node order.
func fanOut[T any](ctx context.Context, q *QuorumExec, d time.Duration, fn func(ctx context.Context, i int, c Client) T) []T {
	if d == 0 {
		d = q.NodeTimeout
	}
	out := make([]T, len(q.Clients))
	var wg sync.WaitGroup
	for i, c := range q.Clients {
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

func (q *QuorumExec) Eval(ctx context.Context, d time.Duration, s *Script, c Call) []Result {
	ctx, cancel := Bound(ctx, q.Timeout)
	defer cancel()
	return fanOut(ctx, q, d, func(ctx context.Context, _ int, n Client) Result {
		v, err := n.Eval(ctx, s, c.Keys, c.Args)
		return Result{v, err}
	})
}

// EvalOn runs c of s on the nodes i for which on[i] is set, each bounded
// by d; the others are not contacted (Redlock's undo).
func (q *QuorumExec) EvalOn(ctx context.Context, d time.Duration, s *Script, c Call, on []bool) {
	ctx, cancel := Bound(ctx, q.Timeout)
	defer cancel()
	fanOut(ctx, q, d, func(ctx context.Context, i int, n Client) error {
		if !on[i] {
			return nil
		}
		_, err := n.Eval(ctx, s, c.Keys, c.Args)
		return err
	})
}

func (q *QuorumExec) EvalBatch(ctx context.Context, d time.Duration, s *Script, calls []Call) [][]Result {
	ctx, cancel := Bound(ctx, q.Timeout)
	defer cancel()
	return fanOut(ctx, q, d, func(ctx context.Context, _ int, n Client) []Result {
		return n.EvalBatch(ctx, s, calls)
	})
}

// Subscribe subscribes on the first node that accepts, trying them in
// turn: every release publishes on every node, so one subscription hears
// all. When it fails the registry subscribes again, on the next node.
func (q *QuorumExec) Subscribe(ctx context.Context, pattern string) (Subscription, error) {
	ctx, cancel := Bound(ctx, q.Timeout)
	defer cancel()
	start := int(q.next.Add(1))
	var errs []error
	for k := range q.Clients {
		c := q.Clients[(start+k)%len(q.Clients)]
		nctx, cancel := context.WithTimeout(ctx, q.NodeTimeout)
		sub, err := c.PSubscribe(nctx, pattern)
		cancel()
		if err == nil {
			return sub, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("lockyard: no Redlock node accepted the subscription: %w", Join(errs...))
}

// Info is not read from Redlock nodes.
func (q *QuorumExec) Info(context.Context, string) (string, error) { return "", ErrNoInfo }

// Tally counts the nodes of n that did a call and those that failed: a
// majority rule.
type Tally struct {
	N            int
	Done, failed int
	first        error
}

func (t *Tally) Fail(err error) {
	t.failed++
	t.first = FirstOf(t.first, err)
}

func (t *Tally) need() int      { return t.N/2 + 1 }
func (t *Tally) Majority() bool { return t.Done >= t.need() }
func (t *Tally) Hopeless() bool { return t.failed > t.N-t.need() }
func (t *Tally) Err() error {
	return fmt.Errorf("%w: %d of %d nodes succeeded, %d failed, a majority is %d: %w",
		ErrNoQuorum, t.Done, t.N, t.failed, t.need(), t.first)
}

// MajorityDone combines replies of 1 (done) or 0 (key gone or another's):
// true on a majority, an ErrNoQuorum error when the failures leave no
// majority possible, else false. With one node it is that node's reply.
func MajorityDone(res []Result) (bool, error) {
	if len(res) == 1 {
		return DecodeDone(res[0].Reply, res[0].Err)
	}
	v := Tally{N: len(res)}
	for _, r := range res {
		ok, err := DecodeDone(r.Reply, r.Err)
		switch {
		case err != nil:
			v.Fail(err)
		case ok:
			v.Done++
		}
	}
	switch {
	case v.Majority():
		return true, nil
	case v.Hopeless():
		return false, v.Err()
	}
	return false, nil
}

// FirstOf returns first, or err if first is nil.
func FirstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
