package registry

import (
	"github.com/lockyard/lockyard/internal/core"
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
// hold, or a hold begins with goroutines queued, the hold is guarded (its
// timer fires at its deadline, internal/core/hold.go). A hold found lost, by its timer,
// by a renewal or by a goroutine that queues, goes through hold.lose, which
// tells the lock last (holdLost): goroutines queue behind it, so it is
// revoked. An owner that is already finishing its outermost unlock is never
// revoked (reentrant.Mutex.Revoke).

// queueHook is a RedisLock as the local mutex's reentrant.Observer (its
// Queued runs when a goroutine has queued on the local mutex) and as the
// holder of its holds.
type queueHook RedisLock

var _ core.Holder = (*queueHook)(nil)

func (q *queueHook) KindName() string { return kindLock }

// Queued loses a lost hold at once and guards a valid one. A hold that is
// being passed on or released is left to that path, which reports its
// loss if it was lost (a pass may still keep the key for a new hold).
func (q *queueHook) Queued() {
	l := (*RedisLock)(q)
	h := l.hold.Load()
	switch {
	case h == nil:
	case !h.Lost(l.eng.core.Now()):
		h.Guard() // does nothing once h is released
	case !h.Released():
		h.Lose()
	}
}

// HoldLost revokes h, lost, if goroutines queue behind it; otherwise the
// next one to queue does (Queued), or the holder's unlock reports it.
func (q *queueHook) HoldLost(h *core.Hold) {
	l := (*RedisLock)(q)
	if l.local.Waiters() > 0 {
		l.revoke(h)
	}
}

// revokeLost revokes the current hold if it is lost, and reports whether
// it did (TryLock then tries again).
func (l *RedisLock) revokeLost() bool {
	h := l.hold.Load()
	if h == nil || !h.Lost(l.eng.core.Now()) || h.Released() {
		return false
	}
	h.Lose()
	return l.revoke(h)
}

// revoke takes the local mutex from the owner of h, lost, if h is still
// the lock's hold and held (not being handed over or released): h is
// retired, and its key deleted in the background if it still carries h's
// token. The mutex goes to the next local waiter.
func (l *RedisLock) revoke(h *core.Hold) bool {
	r := l.eng
	var since int64
	if !l.local.Revoke(func() bool {
		since = l.since.Load() // the revoked owner's: the next owner sets its own once this returns true
		return l.hold.Load() == h && l.phase.CompareAndSwap(int32(held), int32(idle))
	}) {
		return false
	}
	r.obs.releasedLater(kindLock, l.key, h, since)
	h.Retire()
	if l.hold.CompareAndSwap(h, nil) {
		l.releaseLater(h.Token)
	}
	r.core.Log.Warn("lockyard: lock lost while held; passed on to the next goroutine", "key", l.key, "token", h.Fence)
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
