package registry

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The fan-out of a Redlock registry: every call runs on every node in
// parallel, and a tally of the replies decides.

// fanOut runs fn on every node of q in parallel, each with ctx bounded by
// the node timeout d, and returns the results in node order.
func fanOut[T any](ctx context.Context, q *quorumStore, d time.Duration, fn func(ctx context.Context, i int, c Client) T) []T {
	out := make([]T, len(q.nodes))
	var wg sync.WaitGroup
	for i, c := range q.nodes {
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

// evalAll runs one script call on every node, each bounded by d.
func (q *quorumStore) evalAll(ctx context.Context, d time.Duration, s *Script, c Call) []Result {
	return fanOut(ctx, q, d, func(ctx context.Context, _ int, n Client) Result {
		v, err := n.Eval(ctx, s, c.Keys, c.Args)
		return Result{v, err}
	})
}

// count combines replies of 1 (done) or 0 (key gone or another's): true on
// a majority, an ErrNoQuorum error when the failures leave no majority
// possible, else false.
func (q *quorumStore) count(res []Result) (bool, error) {
	v := tally{q: q}
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

// tally counts the nodes that did a call and those that failed.
type tally struct {
	q            *quorumStore
	done, failed int
	first        error
}

func (t *tally) fail(err error) {
	t.failed++
	t.first = firstOf(t.first, err)
}

func (t *tally) need() int      { return len(t.q.nodes)/2 + 1 }
func (t *tally) majority() bool { return t.done >= t.need() }
func (t *tally) hopeless() bool { return t.failed > len(t.q.nodes)-t.need() }
func (t *tally) err() error {
	return fmt.Errorf("%w: %d of %d nodes succeeded, %d failed, a majority is %d: %w",
		ErrNoQuorum, t.done, len(t.q.nodes), t.failed, t.need(), t.first)
}

// firstOf returns first, or err if first is nil.
func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
