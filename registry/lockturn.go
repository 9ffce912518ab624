package registry

import (
	"context"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// A lock's part of the local hand-off (handoff.go): its turn bookkeeping,
// its pass (pass.lua) and taking over a hold handed over.

// maxChainSpan bounds a run that matches the run of a client that took the
// key at the end of the last one (see turn.span).
const maxChainSpan = 250 * time.Millisecond

// graceSlack is added to two round trips for the grace after a run of
// local holds: room for the told client's scheduling. While a client that
// writes no queue entry was seen to take the key within foreignMemory
// (turn.foreign), the grace is at least 1/graceShare of the run: with two
// round trips alone (about 0.6 ms after a 24 ms run), a Spring SPIN client
// polling every 100 ms found the key free in 3-4% of its tries, 2 to 16
// times in 10 s, and waited up to 6.3 s (issue 37, fault 4). The floor
// costs the registry up to a tenth of its throughput, so it is paid only
// while such a client is about: a registry alone (or beside lockyard
// waiters, which queue and get turns) keeps two round trips.
const (
	graceSlack    = 500 * time.Microsecond
	graceShare    = 10
	foreignMemory = 5 * time.Second
)

// handOff passes the hold h of who, whose outermost unlock this is, to the
// next local waiter (engine.handOff), with the TTL it asked for (LockFor;
// else expireAfter). The error says why a pass failed.
func (l *RedisLock) handOff(ctx context.Context, h *core.Hold, who reentrant.Owner) (handoffResult, error) {
	next := l.eng.cfg.expireAfter
	if req, ok := l.local.Next(); ok && req.TTL > 0 {
		next = req.TTL
	}
	return l.eng.handOff(ctx, l.key, h, &l.turn.run, next, l.turn.span, 1, lockPass{l, who})
}

// lockPass is a lock's part of its local hand-off (passer).
type lockPass struct {
	l   *RedisLock
	who reentrant.Owner
}

func (p lockPass) give() handoffResult       { return p.l.giveLocal(p.who) }
func (p lockPass) releaseLater(token string) { p.l.releaseLater(token) }
func (p lockPass) pass(ctx context.Context, h *core.Hold, ttl time.Duration, force bool, sent int64) (handoffResult, error) {
	return p.l.pass(ctx, h, ttl, force, sent)
}

// giveLocal hands the local mutex, with the current hold, to the head of
// the queue. If the waiters left meanwhile who still owns both.
func (l *RedisLock) giveLocal(who reentrant.Owner) handoffResult {
	ok, err := l.local.HandOff(who)
	if err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
	if !ok {
		return notHandedOver
	}
	return handedOver
}

// pass runs pass.lua for h, sent at sent, setting the key's TTL to ttl;
// force releases it even with nobody in line (the run of local holds is
// over). When the key is kept it installs a hold of ttl renewed from sent
// (and, with fencing, a new token) for the next local goroutine.
func (l *RedisLock) pass(ctx context.Context, h *core.Hold, ttl time.Duration, force bool, sent int64) (handoffResult, error) {
	r := l.eng
	l.turn.mark = l.wake.Mark() // release messages from now on count for the next holder's wait
	p, err := l.proto.pass(ctx, l.key, h.Token, ttl, l.hint(false, true), force)
	if err != nil {
		return notHandedOver, err
	}
	rtt := time.Duration(r.core.Now() - sent)
	l.turn.run.LastCmd, l.turn.rtt = sent, rtt
	switch p.outcome {
	case passKept:
		l.install(core.NewHold(&r.core, l.key, h.Token, p.fence, ttl, core.ValidUntil(sent, ttl), (*queueHook)(l), l.proto))
		return handedOver, nil
	case passReleased:
		l.turn.waitUntil, l.turn.after = sent+int64(p.sleep), p.after
		l.turn.queued, l.turn.taken = true, true
		if l.wake != nil {
			r.subscriber.want(l.key) // its turn is announced by a release message
		}
		return releasedForOthers, nil
	case passFreed:
		// Long enough for a client told by the release message to take
		// the key (its wake-up and its obtain), and, while a client that
		// writes no queue entry is about, at least a tenth of the run that
		// ends (of at most maxChainSpan: a run of long holds does not idle
		// the key longer): one that polls (Spring's SPIN) finds the key
		// free in that share of its tries.
		grace := 2*rtt + graceSlack
		if l.turn.foreign > 0 && sent-l.turn.foreign < int64(foreignMemory) {
			grace = max(grace, min(time.Duration(sent-l.turn.run.Since), maxChainSpan)/graceShare)
		}
		l.turn.yield, l.turn.grace = true, min(grace, r.cfg.idle)
		l.turn.taken, l.turn.freed = true, sent
		return releasedForOthers, nil
	case passGone:
		return notHandedOver, l.gone()
	}
	return notHandedOver, nil // declined
}

// inherit takes over a hold handed over by the previous local holder, if
// any, and reports whether the calling goroutine, which asked for a TTL of
// ttl, now holds the lock. A hold of another TTL (the goroutine it was
// meant for gave up, and this one was next) is renewed to ttl first. A hold
// that is no longer valid is dropped and its key freed in the background.
func (l *RedisLock) inherit(ctx context.Context, ttl time.Duration) bool {
	h := l.hold.Load()
	if h == nil {
		return false
	}
	if h.TTL() != ttl && !h.Lost(l.eng.core.Now()) {
		_ = l.renew(ctx, ttl) // a failure leaves h lost, or valid at its TTL
	}
	if !h.Lost(l.eng.core.Now()) {
		l.setPhase(held)
		l.touch()
		if l.local.Waiters() > 0 {
			h.Guard()
		}
		return true
	}
	h.Lose() // the caller owns the mutex, not yet held: nothing is revoked
	h.Retire()
	l.hold.Store(nil)
	l.releaseLater(h.Token)
	return false
}

// yieldFirst makes the first acquisition after the end of a run of local
// holds wait grace, so that another client, told by the release message or
// polling, can take the key.
func (l *RedisLock) yieldFirst(ctx context.Context) error {
	if !l.turn.yield {
		return nil
	}
	l.turn.yield = false
	return l.eng.core.BG.Sleep(ctx, l.turn.grace, nil)
}
