package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// hold is one acquisition of a lock in Redis: from a successful obtain to the
// release. Its fields other than deadline and the lost signal never change.
type hold struct {
	token string        // the value stored at the lock key
	fence int64         // fencing token, 0 without WithFencing
	ttl   time.Duration // the key's time to live: each renewal resets it to this
	// deadline is the end of validity on the registry clock (see
	// Registry.now): the send time of the obtain, or of the latest successful
	// renewal, plus ttl minus the drift margin.
	deadline atomic.Int64
	lostFlag atomic.Bool
	// lostCounted records that Stats counted the loss.
	lostCounted atomic.Bool

	// mu guards the following.
	mu      sync.Mutex
	ctx     context.Context // created by watch; cancelled with ErrLockLost
	cancel  context.CancelCauseFunc
	timer   *time.Timer // fires at deadline while watched
	ended   bool        // released: no more loss reports
	stopped error       // why nothing renews it any more (Close); ends ctx at once
}

// drift is the safety margin subtracted from a hold's validity for clock
// drift between this process and Redis: 1% of the TTL plus 2ms, and at most
// a tenth of the TTL so that very short TTLs stay usable.
func drift(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/10)
}

func newHold(token string, fence int64, ttl time.Duration, deadline int64) *hold {
	h := &hold{token: token, fence: fence, ttl: ttl}
	h.deadline.Store(deadline)
	return h
}

// lost reports whether the hold was found gone or its deadline has passed.
// Loss is final: a renewal that completes later does not revive the hold.
func (h *hold) lost(now int64) bool {
	if h.lostFlag.Load() {
		return true
	}
	if now >= h.deadline.Load() {
		h.lostFlag.Store(true)
		return true
	}
	return false
}

// extend moves the deadline to d, measured from a renewal's send time,
// unless the hold is already lost or d is not later (renewals may complete
// out of order). It reports whether the hold is still valid.
func (h *hold) extend(now, d int64) bool {
	for {
		cur := h.deadline.Load()
		if h.lostFlag.Load() || now >= cur {
			h.lostFlag.Store(true)
			return false
		}
		if d <= cur || h.deadline.CompareAndSwap(cur, d) {
			return true
		}
	}
}

// markLost records that the hold is gone and cancels its watch context.
func (h *hold) markLost() {
	h.lostFlag.Store(true)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil && !h.ended {
		h.cancel(ErrLockLost)
	}
}

// watch returns a context cancelled with cause ErrLockLost when the hold is
// lost: at its deadline unless renewed first, or when markLost is called.
// The first call arms one timer; end disarms it.
func (h *hold) watch(r *Registry) context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx != nil {
		return h.ctx
	}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	if h.ended {
		return h.ctx
	}
	if h.stopped != nil {
		h.cancel(h.stopped)
		return h.ctx
	}
	if h.lost(r.now()) {
		h.cancel(ErrLockLost)
		return h.ctx
	}
	h.timer = time.AfterFunc(time.Duration(h.deadline.Load()-r.now()), func() { h.check(r) })
	return h.ctx
}

// check runs when the timer fires: the hold is lost if the deadline has
// passed; otherwise a renewal moved it and the timer is re-armed.
func (h *hold) check(r *Registry) {
	now := r.now()
	if h.lost(now) {
		h.markLost()
		r.stats.lostHold(h)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.timer.Reset(time.Duration(h.deadline.Load() - now))
	}
}

// stop records that nothing renews h any more (its registry was closed)
// and ends its watch context with cause, ahead of the loss to come.
func (h *hold) stop(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended || h.stopped != nil {
		return
	}
	h.stopped = cause
	if h.cancel != nil {
		h.cancel(cause)
	}
}

// end marks the hold released: its timer stops and it reports no more loss.
func (h *hold) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
}

// released reports whether end was called.
func (h *hold) released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}
