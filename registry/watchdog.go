package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// renewBatchSize bounds how many renewals go in one pipelined flush: 10 000
// held locks cost two round trips per renewal period.
const renewBatchSize = 5000

// watchdog renews the holds of a registry made WithAutoRenew: one goroutine,
// started by the first hold, renews every tracked hold every expireAfter/3
// in pipelined batches, until Close. Without WithAutoRenew it tracks
// nothing.
type watchdog struct {
	r       *Registry
	enabled bool
	started atomic.Bool

	// mu guards held: the holds to renew, one per lock.
	mu   sync.Mutex
	held map[*RedisLock]*hold
}

// track records h, l's new hold, and starts the watchdog on first use.
func (w *watchdog) track(l *RedisLock, h *hold) {
	if !w.enabled {
		return
	}
	w.mu.Lock()
	w.held[l] = h
	w.mu.Unlock()
	w.r.bg.startOnce(&w.started, w.loop)
	if w.r.bg.isClosed() { // Close ran meanwhile: see stopAll
		h.stop(errRenewalsStopped)
	}
}

// errRenewalsStopped ends the watch context of an auto-renewed hold when
// its registry is closed: nothing renews it any more, so it will be lost at
// its deadline. It matches both ErrClosed and ErrLockLost.
var errRenewalsStopped error = renewalsStopped{}

type renewalsStopped struct{}

func (renewalsStopped) Error() string {
	return "lockyard: registry closed: the lock is no longer renewed and will be lost"
}

func (renewalsStopped) Is(target error) bool { return target == ErrClosed || target == ErrLockLost }

// stopAll tells every hold the watchdog renews that it renews them no more
// (Close): their Lost channels close, and ExecuteLocked's fn sees its context
// end with errRenewalsStopped, instead of a TTL later.
func (w *watchdog) stopAll() {
	if !w.enabled {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.held {
		h.stop(errRenewalsStopped)
	}
}

// untrack forgets h, unless l has moved on to a newer hold.
func (w *watchdog) untrack(l *RedisLock, h *hold) {
	if !w.enabled {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[l] == h {
		delete(w.held, l)
	}
}

// loop renews every period until Close.
func (w *watchdog) loop() {
	t := time.NewTicker(w.r.cfg.expireAfter / 3)
	defer t.Stop()
	for {
		select {
		case <-w.r.bg.closed:
			return
		case <-t.C:
			w.renewAll()
		}
	}
}

type renewal struct {
	l *RedisLock
	h *hold
}

// renewAll renews a snapshot of the held locks, in batches.
func (w *watchdog) renewAll() {
	w.mu.Lock()
	batch := make([]renewal, 0, len(w.held))
	for l, h := range w.held {
		batch = append(batch, renewal{l, h})
	}
	w.mu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), renewBatchSize)
		w.renew(batch[:n])
		batch = batch[n:]
	}
}

// renew renews one batch and applies the replies. A renewal that failed on
// a pooled connection the server had closed (restart, CLIENT KILL) is sent
// again at once rather than a period later: renewing is idempotent.
func (w *watchdog) renew(batch []renewal) {
	r := w.r
	for try := 1; len(batch) > 0; try++ {
		calls := make([]renewCall, len(batch))
		for i, x := range batch {
			calls[i] = renewCall{lk: x.l.key, token: x.h.token, ttl: x.h.ttl}
		}
		sent := r.now()
		var (
			again   []renewal
			lastErr error
			failed  int
		)
		for i, res := range r.store.renewBatch(r.bg.ctx, calls) {
			x := batch[i]
			switch {
			case isStaleConn(res.err) && !errors.Is(res.err, ErrReplicaAck) && try < netTries && !r.bg.isClosed():
				again = append(again, x)
			case res.err != nil && (isAmbiguous(res.err) || errors.Is(res.err, ErrReplicaAck)):
				lastErr, failed = res.err, failed+1
			case x.h.released(): // an Unlock raced this renewal: nothing to report
			case res.err != nil:
				r.log.Warn("lockyard: renewal failed", "key", x.l.key, "err", res.err)
			default:
				if err := x.l.renewed(x.h, res.ok, sent); err != nil {
					r.log.Warn("lockyard: lock lost: renewal found the key gone", "key", x.l.key, "token", x.h.fence)
				}
			}
		}
		if lastErr != nil {
			r.log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", failed, "err", lastErr)
		}
		batch = again
	}
}

// renew resets the TTL of the current hold if the registry holds the lock
// (RenewLock).
func (l *RedisLock) renew(ctx context.Context) error {
	r := l.reg
	h := l.hold.Load()
	if h == nil {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, l.key)
	}
	sent := r.now()
	if h.lost(sent) {
		l.lose(h)
		return fmt.Errorf("%w: validity of %q ended before renewal", ErrLockLost, l.key)
	}
	ok, err := r.store.renew(ctx, l.key, h.token, h.ttl)
	switch {
	case errors.Is(err, ErrReplicaAck):
		return err
	case err != nil:
		return wrapKey("renewing", l.key, err)
	}
	return l.renewed(h, ok, sent)
}

// renewed applies the outcome of a renewal of h sent at sent: the key was
// found (ok) and the validity moves, or the hold is lost.
func (l *RedisLock) renewed(h *hold, ok bool, sent int64) error {
	r := l.reg
	if !ok {
		l.lose(h)
		return errGone(l.key)
	}
	if !h.extend(r.now(), sent+int64(h.ttl-drift(h.ttl))) {
		l.lose(h)
		return fmt.Errorf("%w: renewal of %q completed after its validity ended", ErrLockLost, l.key)
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
