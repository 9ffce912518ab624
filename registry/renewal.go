package registry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

type renewal struct {
	l *RedisLock
	h *hold
}

// renew renews one batch of the watchdog and applies the replies. A hold
// whose renewal is already in flight (RenewLock, a pass) is skipped: that
// one renews it. A renewal that failed on a pooled connection the server
// had closed (restart, CLIENT KILL) is sent again at once rather than a
// period later: renewing is idempotent.
func (w *watchdog) renew(batch []renewal) {
	r := w.r
	batch = lockRenewing(batch)
	defer func() {
		for _, x := range batch {
			x.h.renewing.Unlock()
		}
	}()
	todo := batch
	for try := 1; len(todo) > 0; try++ {
		calls := make([]renewCall, len(todo))
		ttls := make([]time.Duration, len(todo))
		for i, x := range todo {
			ttls[i] = x.h.TTL()
			calls[i] = renewCall{lk: x.l.key, token: x.h.token, ttl: ttls[i]}
		}
		sent := r.now()
		var (
			again   []renewal
			lastErr error
			failed  int
		)
		for i, res := range r.store.renewBatch(r.bg.ctx, calls) {
			x := todo[i]
			switch {
			case isStaleConn(res.err) && !errors.Is(res.err, ErrReplicaAck) && try < netTries && !r.bg.isClosed():
				again = append(again, x)
			case res.err != nil && (isAmbiguous(res.err) || errors.Is(res.err, ErrReplicaAck)):
				lastErr, failed = res.err, failed+1
			case x.h.released(): // an Unlock raced this renewal: nothing to report
			case res.err != nil:
				r.log.Warn("lockyard: renewal failed", "key", x.l.key, "err", res.err)
			default:
				if err := x.l.renewed(x.h, res.ok, sent, ttls[i]); err != nil {
					r.log.Warn("lockyard: lock lost: renewal found the key gone", "key", x.l.key, "token", x.h.fence)
				}
			}
		}
		if lastErr != nil {
			r.log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", failed, "err", lastErr)
		}
		todo = again
	}
}

// lockRenewing takes the renewing lock of each hold of batch, and returns
// those it took: a hold whose renewal is in flight, or that was released,
// is left out.
func lockRenewing(batch []renewal) []renewal {
	out := batch[:0]
	for _, x := range batch {
		if !x.h.renewing.TryLock() {
			continue
		}
		if x.h.released() { // passed on or released since due() picked it
			x.h.renewing.Unlock()
			continue
		}
		out = append(out, x)
	}
	return out
}

// renew resets the TTL of the current hold if the registry holds the lock
// (RenewLock), to ttl, or to the hold's own TTL if ttl is 0; a ttl other
// than the hold's becomes its TTL from now on (RenewLockFor).
func (l *RedisLock) renew(ctx context.Context, ttl time.Duration) error {
	h := l.lockCurrent()
	if h == nil {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, l.key)
	}
	defer h.renewing.Unlock()
	return l.renewHold(ctx, h, ttl)
}

// renewHold renews h, whose renewing lock the caller holds, to ttl (0: its
// own TTL).
func (l *RedisLock) renewHold(ctx context.Context, h *hold, ttl time.Duration) error {
	r := l.reg
	if ttl == 0 {
		ttl = h.TTL()
	}
	sent := r.now()
	if h.lost(sent) {
		l.lose(h)
		return fmt.Errorf("%w: validity of %q ended before renewal", ErrLockLost, l.key)
	}
	ok, err := r.store.renew(ctx, l.key, h.token, ttl)
	if err != nil && ttl < h.TTL() && (isAmbiguous(err) || errors.Is(err, ErrReplicaAck)) {
		// The shorter TTL may be the key's now: believe the worse.
		l.shorten(h, sent, ttl)
	}
	switch {
	case errors.Is(err, ErrReplicaAck):
		return err
	case err != nil:
		return wrapKey("renewing", l.key, err)
	case h.released() && !h.lost(r.now()):
		// Released while the renewal was in flight (which found the key
		// deleted, or renewed it just before): not a loss.
		return fmt.Errorf("%w: %q was released during its renewal", ErrNotOwner, l.key)
	}
	return l.renewed(h, ok, sent, ttl)
}

// lockCurrent returns the lock's current hold with its renewing lock
// taken, or nil if the registry holds none. A hold that was released (or
// passed on) while it waited for the lock is not returned: its TTL must not
// reach Redis after its successor's.
func (l *RedisLock) lockCurrent() *hold {
	for {
		h := l.hold.Load()
		if h == nil {
			return nil
		}
		h.renewing.Lock()
		if !h.released() {
			return h
		}
		h.renewing.Unlock()
		if l.hold.Load() == h { // being released: not held any more
			return nil
		}
	}
}

// shorten applies a renewal to ttl, shorter than h's, that may or may not
// have run: h's validity ends no later than the renewal's would, and later
// renewals use ttl.
func (l *RedisLock) shorten(h *hold, sent int64, ttl time.Duration) {
	if h.shorten(l.reg.now(), validUntil(sent, ttl), ttl) {
		l.reg.watchdog.retimed(l, h)
		if l.local.Waiters() > 0 {
			l.guard(h)
		}
	}
}

// renewed applies the outcome of a renewal of h to ttl sent at sent: the
// key was found (ok) and the validity moves, or the hold is lost.
func (l *RedisLock) renewed(h *hold, ok bool, sent int64, ttl time.Duration) error {
	r := l.reg
	if !ok {
		l.lose(h)
		return errGone(l.key)
	}
	old := h.TTL()
	if !h.renewed(r.now(), sent, ttl) {
		l.lose(h)
		return fmt.Errorf("%w: renewal of %q completed after its validity ended", ErrLockLost, l.key)
	}
	if ttl != old {
		r.watchdog.retimed(l, h)
		if ttl < old && l.local.Waiters() > 0 {
			l.guard(h) // the guard timer must fire at the earlier deadline
		}
	}
	r.stats.renewals.Add(1)
	return nil
}

// lose marks h lost: its Lost channel closes, Stats counts it, the
// watchdog stops renewing it, and goroutines queued behind it get the
// lock (revoke.go).
func (l *RedisLock) lose(h *hold) {
	h.markLost()
	l.reg.stats.lostHold(h)
	l.reg.watchdog.untrack(l, h)
	if l.local.Waiters() > 0 {
		l.revoke(h) // goroutines queue behind it
	}
}
