package registry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// mutexProto is the protocol of the exclusive lock (RedisLock and Lease)
// on any executor: its scripts (lua/), the KEYS and ARGV of each
// (scripts.go), the decoding of their replies (reply.go), and the rule of
// each operation:
//   - obtain, renew and release need a majority of the nodes (on one
//     node, its reply; Redlock's obtain in mutexquorum.go);
//   - leave and nudge run on every node, best effort;
//   - a pass needs one node's view of the waiters: a Redlock registry
//     declines it (passDeclined), and its holders release instead.
//
// On one Client it also uses that Client's plain commands and WAIT
// (replica.go). The per-key path calls it and never asks which executor
// it has. A Redlock operation counts once in Stats, by its outcome.
type mutexProto struct {
	x   core.Executor
	one *core.ClientExec // x, when it is one Client (nil: Redlock)
	s   scripts
	// timeout is the command timeout.
	timeout time.Duration
	stats   *core.Counters
	// setNX, setNXGet: a free key may be taken with the Client's plain
	// SET NX PX or SET NX GET PX (it has them; one Client, no fencing, no
	// WithReplicaAck).
	setNX, setNXGet bool
	noGet           atomic.Bool // the server refused SET NX GET (before Redis 7.0)
	ack             ack         // replicas to wait for; zero without WithReplicaAck
	// native renews and releases with the server's native commands where
	// it has them (native.go): one Client, no WithReplicaAck, no
	// WithScriptsOnly; else nil.
	native *native
	// dropRefused: the server refused drop.lua its EXISTS (an ACL
	// without it): every release is release.lua's.
	dropRefused atomic.Bool
}

func newMutexProto(x core.Executor, s scripts, cfg config, st *core.Counters, log *slog.Logger) *mutexProto {
	p := &mutexProto{x: x, s: s, timeout: cfg.commandTimeout, stats: st,
		ack: ack{replicas: cfg.ackReplicas, timeout: cfg.ackTimeout}}
	p.one, _ = x.(*core.ClientExec)
	if p.one != nil && !cfg.fencing && cfg.ackReplicas == 0 {
		p.setNX, p.setNXGet = p.one.Plain() // else the obtain script, always
	}
	if p.one != nil && cfg.ackReplicas == 0 && !cfg.scriptsOnly {
		p.native = newNative(p.one, &p.s, st, log)
	}
	return p
}

// count counts the outcome of a Redlock operation (a core.ClientExec counts
// each of its calls itself).
func (p *mutexProto) count(err error) {
	if p.one == nil {
		p.stats.RedisError(err)
	}
}

// obtain takes lk for token if it is free (or already token's) and not
// another waiter's turn. When the caller expects lk to be free and nothing
// but the SET is needed, it first sends a plain command, which does what
// the script's first lines do with less work for the server:
//   - a waiting caller (Lock) sends SET NX PX; only if the key is taken
//     does the script run, to queue it and say how long it sleeps;
//   - a caller that does not wait (TryLock) sends SET NX GET PX, one round
//     trip whether it succeeds or fails: the value it returns is the
//     holder's, this token's own after a resend that followed a lost
//     reply.
//
// Either skips the turn of a waiter that the key may be kept for: a lock
// instance expects its key free only while its acquisitions find it free
// and its releases find nobody queued.
func (p *mutexProto) obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	if p.one == nil {
		return p.obtainQuorum(ctx, lk, token, ttl, h)
	}
	switch {
	case h.free && !h.waits && p.setNXGet && !p.noGet.Load():
		old, existed, err := p.one.SetNXGetCmd(ctx, lk, token, ttl)
		switch {
		case core.IsSyntaxError(err):
			p.noGet.Store(true) // an older server: the script from now on
		case core.IsWrongType(err):
			// A key of another kind: the script's reply names its type.
		case err != nil:
			return unknown, err
		case !existed || old == token: // set, or already ours after a resend
			return grant{ok: true}, nil
		default:
			return unknown, nil
		}
	case h.free && p.setNX:
		if set, err := p.one.SetNXCmd(ctx, lk, token, ttl); err != nil || set {
			return grant{ok: set, sleep: -1, after: -1}, err
		}
	}
	c := p.s.obtain(lk, token, ttl, h)
	if p.ack.replicas > 0 {
		return p.obtainAcked(ctx, lk, token, c)
	}
	v, err := p.one.One(ctx, obtainScript, c)
	if err != nil {
		return unknown, err
	}
	return decodeGrant(v)
}

// pass keeps lk, held by token, for the next holder of this lock instance,
// unless another waiter is in line for it, or force is set (then it
// releases it).
func (p *mutexProto) pass(ctx context.Context, lk, token string, ttl time.Duration, h hint, force bool) (passReply, error) {
	if p.one == nil {
		return passReply{outcome: passDeclined}, nil
	}
	v, err := p.one.One(ctx, passScript, p.s.pass(lk, token, ttl, h, force))
	if err != nil {
		return passReply{}, err
	}
	return decodePass(v)
}

// Renew resets the TTL of lk if token holds it, and reports whether it
// did.
func (p *mutexProto) Renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	c := p.s.renew(lk, token, ttl)
	switch {
	case p.ack.replicas > 0:
		return p.renewAcked(ctx, lk, c)
	case p.one != nil:
		if p.native.renewing(ctx, lk) {
			if ok, handled, err := p.native.renew(ctx, lk, token, ttl); handled {
				return ok, err
			}
		}
		return core.DecodeDone(p.one.One(ctx, renewScript, c))
	}
	ok, err := core.MajorityDone(p.x.Eval(ctx, core.NodeTimeout(p.timeout, ttl), renewScript, c))
	p.count(err)
	return ok, err
}

// RenewBatch renews many holds together (the watchdog), pipelined: one
// reply per call, in order. With WithReplicaAck it renews them one by one
// instead (see renewEach).
func (p *mutexProto) RenewBatch(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	if p.ack.replicas > 0 {
		return p.renewEach(ctx, calls)
	}
	if len(calls) > 0 && p.native.renewing(ctx, calls[0].Key) {
		out := make([]core.RenewReply, len(calls))
		again := p.native.renewBatch(ctx, calls, out)
		if len(again) > 0 {
			rest := make([]core.RenewCall, len(again))
			for k, i := range again {
				rest[k] = calls[i]
			}
			for k, r := range p.renewScripts(ctx, rest) {
				out[again[k]] = r
			}
		}
		return out
	}
	return p.renewScripts(ctx, calls)
}

// renewScripts renews calls by renew.lua, pipelined on every node.
func (p *mutexProto) renewScripts(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	batch := make([]Call, len(calls))
	for i, x := range calls {
		batch[i] = p.s.renew(x.Key, x.Token, x.TTL)
	}
	per := p.x.EvalBatch(ctx, 0, renewScript, batch)
	out := make([]core.RenewReply, len(calls))
	col := make([]Result, len(per))
	for j := range calls {
		for i := range per {
			if j < len(per[i]) {
				col[i] = per[i][j]
			} else { // a Client that broke its contract
				col[i] = Result{Err: core.ErrShortBatch}
			}
		}
		out[j].OK, out[j].Err = core.MajorityDone(col)
		p.count(out[j].Err)
	}
	return out
}

// release deletes lk and publishes the release if token holds it, and
// reports whether it did, and whether waiters are queued for lk (as far as
// one node can tell: never under Redlock). quiet says the caller expects
// no waiter of another instance (its acquisition found the key free, and
// no release found anyone queued lately: lifecycle.go, crowdMemory): only
// then may the release be the
// server's native delete (native.go), which gives no turn, or, on a server
// without one, drop.lua (two keys, no rule of the queue: 1.6 µs of the
// server's time less than release.lua on Redis 7.0), which leaves a key
// that waiters are queued for to release.lua. With waiters
// queued, release.lua gives the turn to the first in line, who then takes
// the key unannounced; after a native release that take is announced, and
// the listeners behind wake a turn early (with every release native: twice
// the messages and the obtains per acquisition, 8 registries). A native
// release that finds waiters all the same is followed by nudge.lua, which
// gives the turn and announces the dead entries it drops.
func (p *mutexProto) release(ctx context.Context, lk, token string, quiet bool) (done, others bool, err error) {
	if quiet && p.native.releasing(ctx, lk) {
		done, others, told, handled, err := p.native.release(ctx, lk, token)
		if handled {
			switch {
			case done && !told: // the message failed: nudge.lua sends it
				_, _ = p.nudge(ctx, lk, token)
			case done && others:
				// Waiters after all: nudge.lua gives the turn, and drops
				// and announces the entries gone ahead (unless the first
				// in line, woken by the message, took the key already).
				_, _ = p.nudgeTold(ctx, lk, token, 1)
			}
			return done, others, err
		}
	}
	if quiet && p.one != nil && !p.dropRefused.Load() {
		v, err := p.one.One(ctx, dropScript, p.s.drop(lk, token))
		switch {
		case err == nil:
			n, err := core.ReplyInt(v)
			if n == 4 { // the ACL refuses EXISTS: release.lua from now on
				p.dropRefused.Store(true)
			}
			if err != nil || n < 3 {
				return n == 1, false, err
			}
		case core.IsTryAgain(err): // its slot migrates: the key alone, as releaseOn ends (on five keys it would be refused too)
			c := p.s.release(lk, token)
			c.Keys = c.Keys[:1]
			return decodeRelease(p.one.One(ctx, releaseScript, c))
		default:
			return false, false, err
		}
	}
	c := p.s.release(lk, token)
	if p.one != nil {
		return releaseOn(ctx, p.one, releaseScript, c)
	}
	done, err = core.MajorityDone(p.x.Eval(ctx, 0, releaseScript, c))
	p.count(err)
	return done, false, err
}

// leave takes waiter out of lk's wait queue, when it stops waiting, on
// every node, best effort: a node that misses it lets the entry lapse.
func (p *mutexProto) leave(ctx context.Context, lk, waiter string) error {
	return firstErr(p.x.Eval(ctx, 0, leaveScript, p.s.leave(lk, waiter)))
}

// nudge tells waiters that lk, left to expire by token (ReleaseAfter), is
// free, once it is; left is how long the key still lives, if it does, or
// negative: it was free, or another holder's, and nothing is left to do.
// Under Redlock it runs on every node, best effort (each keeps a queue of
// its own), and a node whose key still lives lets its waiters poll.
func (p *mutexProto) nudge(ctx context.Context, lk, token string) (left time.Duration, err error) {
	return p.nudgeTold(ctx, lk, token, 0)
}

// nudgeTold is nudge for a key whose release already published told
// messages.
func (p *mutexProto) nudgeTold(ctx context.Context, lk, token string, told int) (left time.Duration, err error) {
	res := p.x.Eval(ctx, 0, nudgeScript, p.s.nudge(lk, token, told))
	if err := firstErr(res); err != nil || len(res) > 1 {
		return -1, err
	}
	n, err := core.ReplyInt(res[0].Reply)
	if n < 0 {
		return -1, err
	}
	return time.Duration(n) * time.Millisecond, err
}

// firstErr returns the first error of res, or nil.
func firstErr(res []Result) error {
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
