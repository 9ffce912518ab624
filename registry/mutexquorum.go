package registry

import (
	"context"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The mutex protocol's obtain under Redlock: a majority of the nodes, the
// fence counter raised on every node, and the nodes taken undone when no
// majority took the key.

// obtainQuorum runs obtain.lua on every node (mutexProto.obtain under
// Redlock). On a majority it grants the lock with the highest fence
// counter, after raising every node's counter to it (fencing); otherwise
// it releases the nodes it took and reports the shortest TTL of another
// holder, or an ErrNoQuorum error.
func (p *mutexProto) obtainQuorum(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	ctx, cancel := core.Bound(ctx, p.timeout)
	defer cancel()
	g, err := p.obtainAll(ctx, lk, token, ttl, h)
	p.count(err)
	return g, err
}

// A refused obtain sleeps as the node that says the shortest sleep, and
// takes every release message for a possible turn: each node keeps a
// queue of its own, and every node publishes.
func (p *mutexProto) obtainAll(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	var (
		v     = core.Tally{N: p.x.Nodes()}
		won   = make([]bool, p.x.Nodes())
		out   = unknown
		final error
	)
	d := core.NodeTimeout(p.timeout, ttl) // the acquisition's TTL sets it
	for i, r := range p.x.Eval(ctx, d, obtainScript, p.s.obtain(lk, token, ttl, h)) {
		g, err := decodeGrant(r.Reply)
		if r.Err != nil {
			err = r.Err
		}
		switch {
		case err != nil:
			v.Fail(err)
			if !core.IsAmbiguous(err) && !core.IsTransient(err) {
				final = core.FirstOf(final, err) // WRONGTYPE and the like
			}
		case g.ok:
			won[i] = true
			v.Done++
			out.fence = max(out.fence, g.fence)
		case g.sleep >= 0 && (out.sleep < 0 || g.sleep < out.sleep):
			out.sleep = g.sleep
		}
	}
	if v.Majority() && p.s.fencing {
		if err := p.raiseFence(ctx, d, lk, out.fence); err != nil {
			p.undo(ctx, d, lk, token, won, v.Done)
			return unknown, err
		}
	}
	if v.Majority() {
		return grant{ok: true, fence: out.fence}, nil
	}
	p.undo(ctx, d, lk, token, won, v.Done)
	switch {
	case final != nil:
		return unknown, final
	case v.Hopeless():
		return unknown, v.Err()
	}
	return out, nil
}

// raiseFence sets the fence counter of every node to at least fence, so
// that any later majority, which shares a node with a majority that took
// it, counts above it. It fails unless a majority took it.
func (p *mutexProto) raiseFence(ctx context.Context, d time.Duration, lk string, fence int64) error {
	v := core.Tally{N: p.x.Nodes()}
	for _, r := range p.x.Eval(ctx, d, fenceScript, p.s.fence(lk, fence)) {
		if r.Err != nil {
			v.Fail(r.Err)
			continue
		}
		v.Done++
	}
	if !v.Majority() {
		return v.Err()
	}
	return nil
}

// undo releases lk on the n nodes marked in won, where this obtain took
// it, best effort: a node that fails keeps it until its TTL. Waiters are
// told, as by any release.
func (p *mutexProto) undo(ctx context.Context, d time.Duration, lk, token string, won []bool, n int) {
	if q, ok := p.x.(*core.QuorumExec); ok && n > 0 {
		q.EvalOn(context.WithoutCancel(ctx), d, releaseScript, p.s.release(lk, token), won)
	}
}
