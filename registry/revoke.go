package registry

import (
	"time"

	"github.com/lockyard/lockyard/internal/reentrant"
)

// A goroutine that holds a lock and never unlocks it (it exited, or it is
// stuck) must not block its registry's other goroutines for good. Once the
// hold's validity has ended, so that another registry may take the key
// anyway, the local mutex is revoked from its owner and passed to the next
// local waiter, which obtains the key in Redis as usual. The old owner's
// late UnlockContext then returns ErrLockLost (Unlock logs it), and its
// Token and Lost see no hold; neither touches the new holder.
//
// The loss is noticed without polling: when a goroutine queues behind a
// hold, or a hold begins with goroutines queued, guard arms the lock's
// guard timer (one per lock, reused) at the hold's deadline; when it fires,
// a lost hold is revoked and a renewed one re-armed. A renewal that finds
// the key gone revokes at once (lose). An owner that is already finishing
// its outermost unlock is never revoked (reentrant.Mutex.Revoke).

// queueHook is a RedisLock as the local mutex's reentrant.Observer: its
// Queued runs when a goroutine has queued on the local mutex.
type queueHook RedisLock

// Queued revokes a lost hold at once and guards a valid one.
func (q *queueHook) Queued() {
	l := (*RedisLock)(q)
	h := l.hold.Load()
	switch {
	case h == nil:
	case h.lost(l.reg.now()):
		l.revoke(h)
	default:
		l.guard(h)
	}
}

// guard arms the guard timer at h's deadline.
func (l *RedisLock) guard(h *hold) {
	d := time.Duration(h.deadline.Load() - l.reg.now())
	if t := l.guardT.Load(); t != nil {
		t.Reset(d)
		return
	}
	t := time.AfterFunc(d, l.checkHolder)
	if !l.guardT.CompareAndSwap(nil, t) { // another goroutine armed one first
		t.Stop()
		l.guardT.Load().Reset(d)
	}
}

// checkHolder runs when the guard timer fires: a lost hold is revoked; a
// valid one (renewed since) is guarded again while goroutines queue.
func (l *RedisLock) checkHolder() {
	h := l.hold.Load()
	switch {
	case h == nil:
	case h.lost(l.reg.now()):
		l.revoke(h)
	case l.local.Waiters() > 0:
		l.guard(h)
	}
}

// revokeLost revokes the current hold if it is lost, and reports whether
// it did (TryLock then tries again).
func (l *RedisLock) revokeLost() bool {
	h := l.hold.Load()
	return h != nil && h.lost(l.reg.now()) && l.revoke(h)
}

// revoke takes the local mutex from the goroutine that holds h, if h is
// still the lock's hold and held (not being handed over or released), and
// ends h: counted lost, retired, and its key deleted in the background if
// it still carries h's token. The mutex goes to the next local waiter.
func (l *RedisLock) revoke(h *hold) bool {
	r := l.reg
	if !l.local.Revoke(func() bool {
		return l.hold.Load() == h && l.phase.CompareAndSwap(int32(held), int32(idle))
	}) {
		return false
	}
	h.markLost() // before retire: whoever watches Lost must hear of it
	r.stats.lostHold(h)
	l.retire(h)
	if l.hold.CompareAndSwap(h, nil) {
		r.cleanup(l.key, h.token)
	}
	r.log.Warn("lockyard: lock lost while held; passed on to the next goroutine", "key", l.key, "token", h.fence)
	return true
}

// revoked reports whether the calling goroutine lost its holds to revoke
// and holds the lock no more. The goroutine's id is read only if some
// owner was revoked: Token and Lost are on the hot path.
func (l *RedisLock) revoked() bool {
	if !l.local.AnyRevoked() {
		return false
	}
	who := reentrant.Self()
	return l.local.Revoked(who) && l.local.Depth(who) == 0
}
