package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/reentrant"
)

// Local hand-off. When the outermost Unlock finds goroutines of the same
// registry queued on the lock, the Redis key stays held and the hold passes
// to the head of the local queue, instead of a delete that the next
// goroutine follows with an obtain (two round trips, and a race that other
// registries win or lose at random).
//
//   - Free pass: no command at all, while the next goroutine asked for the
//     hold's TTL, the hold has at least three quarters of it left, and
//     fewer than maxFreePasses were made since the last command. Without
//     fencing only: the next goroutine inherits the hold, its token and its
//     fencing token.
//   - Pass (store.pass, pass.lua): one round trip sets the TTL that the next
//     goroutine asked for (LockFor; else expireAfter) and, with
//     fencing, gives the next goroutine a new fencing token. If another
//     registry left a wait marker (obtain.lua writes one on every failed
//     attempt), the script releases the key instead, and the next local
//     goroutine yields: it waits before its first attempt (PubSubLock: twice
//     the pass's round trip plus 1ms; SpinLock: one poll interval), so that
//     the other registry's waiter, woken by the release, gets the lock. A
//     store that declines to pass (Redlock) makes the holder release as
//     usual.
//
// So a registry keeps a contended key for at most maxFreePasses+1 local
// holds while another registry waits (contestedFreePasses+1 once it has
// yielded to one), and the Redis key is touched by one command per
// maxFreePasses+1 local holds when nobody else waits.
const maxFreePasses = 8

// contestedFreePasses replaces maxFreePasses for a poll interval after a
// pass found another registry waiting: registries that take turns on a
// key then take shorter ones (4 local holds instead of 9), which halves
// how long each waits for the others' turns.
const contestedFreePasses = 3

// turn is the hand-off bookkeeping of one lock, owned by the goroutine that
// owns its local mutex.
type turn struct {
	passes int           // free passes since the last command on the key
	yield  bool          // the next acquisition waits before its first attempt
	grace  time.Duration // how long a PubSubLock waiter yields
	// taken: an obtain found the key held, and no acquisition has since
	// got it at its first attempt. While it is set, a first attempt runs
	// the obtain script at once instead of trying a plain SET first.
	taken bool
	// contested: until when (mono ns) turns are short, a poll interval
	// after a pass released the key for another registry.
	contested int64
	// queued: this registry's entry is in the key's wait marker (a waiting
	// attempt failed, and no acquisition has succeeded since).
	queued bool
}

type handoffResult int

const (
	notHandedOver     handoffResult = iota // release as usual
	handedOver                             // the next local goroutine holds the lock
	releasedForOthers                      // the pass released the key for another registry
	passFailed                             // the pass failed (the error says why); cleanup started
	releaseAfterPass                       // the pass failed on the network or transiently: release instead
)

// handOff passes the hold h of who, whose outermost unlock this is, to the
// next local waiter. The error says why a pass failed.
func (l *RedisLock) handOff(ctx context.Context, h *hold, who reentrant.Owner) (handoffResult, error) {
	r := l.reg
	now := r.now()
	if r.bg.isClosed() || h.lost(now) {
		return notHandedOver, nil
	}
	next := r.cfg.expireAfter // the TTL the next goroutine asked for
	if tag, ok := l.local.NextTag(); ok && tag > 0 {
		next = time.Duration(tag)
	}
	limit := maxFreePasses
	if now < l.turn.contested {
		limit = contestedFreePasses
	}
	if !r.cfg.fencing && l.turn.passes < limit && h.TTL() == next && h.deadline.Load()-now >= int64(next*3/4) {
		l.turn.passes++
		return l.giveLocal(who), nil
	}
	switch res, err := l.pass(ctx, h, next); {
	case errors.Is(err, ErrLockLost):
		return passFailed, err
	case isStaleConn(err), !isAmbiguous(err) && isTransient(err):
		// Most likely a pooled connection that the server closed, or a
		// Cluster slot in migration (TRYAGAIN: the pass's keys are split
		// between two nodes): the caller releases instead (one key),
		// retrying.
		return releaseAfterPass, err
	case err != nil:
		// The key may or may not still be ours: free it in the
		// background rather than wait for a second command now.
		l.reg.cleanup(l.key, h.token)
		return passFailed, l.releaseFailed(err)
	case res == releasedForOthers:
		l.turn.yield = true
		return res, nil
	case res == handedOver:
		return l.giveLocal(who), nil
	}
	return notHandedOver, nil
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

// pass runs the store's pass for h, setting the key's TTL to ttl. When the
// key is kept it replaces h with a hold of ttl renewed from the pass's send
// time (and, with fencing, a new token).
func (l *RedisLock) pass(ctx context.Context, h *hold, ttl time.Duration) (handoffResult, error) {
	r := l.reg
	// h is retired here whatever the outcome: a renewal of h that lands
	// after the pass (which may delete the key) is not a loss. One that is
	// in flight is waited for, so that it cannot reset the TTL after the
	// pass set another.
	// renewing stays held until the next hold is installed: a renewal
	// waiting for it then finds h released and renews the new hold, or
	// nothing, but never sends h's TTL after the pass sent another.
	l.retire(h)
	h.renewing.Lock()
	defer h.renewing.Unlock()
	sent := r.now()
	p, err := r.store.pass(context.WithoutCancel(ctx), l.key, h.token, ttl)
	if err != nil {
		return notHandedOver, err
	}
	rtt := time.Duration(r.now() - sent)
	l.turn.grace = min(2*rtt+time.Millisecond, r.cfg.idle)
	switch p.outcome {
	case passKept:
		l.turn.passes = 0
		l.install(newHold(h.token, p.fence, ttl, validUntil(sent, ttl)))
		return handedOver, nil
	case passReleased:
		l.turn.contested = r.now() + int64(r.cfg.idle)
		l.turn.taken = true // the next obtain respects their turns (no plain SET)
		return releasedForOthers, nil
	case passGone:
		return notHandedOver, errGone(l.key)
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
	if h.TTL() != ttl && !h.lost(l.reg.now()) {
		_ = l.renew(ctx, ttl) // a failure leaves h lost, or valid at its TTL
	}
	if !h.lost(l.reg.now()) {
		l.setPhase(held)
		l.touch()
		if l.local.Waiters() > 0 {
			l.guard(h)
		}
		return true
	}
	h.markLost() // before retire: whoever watches Lost must hear of it
	l.reg.stats.lostHold(h)
	l.retire(h)
	l.hold.Store(nil)
	l.reg.cleanup(l.key, h.token)
	return false
}

// yieldFirst makes the first acquisition after a release for another
// registry wait, so that the other registry's waiter gets the lock.
func (l *RedisLock) yieldFirst(ctx context.Context) error {
	if !l.turn.yield {
		return nil
	}
	l.turn.yield = false
	d := l.turn.grace
	if l.wake == nil {
		d = pollDelay(l.reg.cfg.idle, -1)
	}
	return l.reg.bg.sleep(ctx, d, nil)
}
