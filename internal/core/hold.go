package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Hold is one acquisition in Redis: a token set at a key, from a successful
// obtain to the release. It is the unit that every lock kind shares: the
// watchdog renews holds, not locks; a Hold watches its own validity with
// one timer; and a Hold is lost by one path, lose, which tells the kind
// that owns it (a holder) last. Its key, token and fence never change; its
// TTL changes only by a renewal to another TTL (RenewLockFor, Lease.Renew).
type Hold struct {
	r     *Core
	key   string  // the Redis key
	Token string  // the value stored at key
	Fence int64   // fencing token, 0 without WithFencing
	Kind  Holder  // told when the hold is lost
	Proto Renewer // renews it
	ttl   atomic.Int64
	// Deadline is the end of validity on the registry clock (see
	// Registry.now): the send time of the obtain, or of the latest successful
	// renewal, plus ttl minus the drift margin.
	Deadline atomic.Int64
	// Renewing is held while a command that resets the key's TTL (a
	// renewal, a pass) is in flight, so that they reach Redis one at a time
	// and in order: the last one sent sets the key's TTL, and the validity
	// follows it, even when RenewLockFor changed the TTL meanwhile. The
	// watchdog skips a hold whose renewal is in flight.
	Renewing sync.Mutex
	lostFlag atomic.Bool
	// lostCounted records that Stats counted the loss.
	lostCounted atomic.Bool

	// mu guards the following.
	mu      sync.Mutex
	ctx     context.Context // created by watch; cancelled with ErrLockLost
	cancel  context.CancelCauseFunc
	timer   *time.Timer // fires at deadline while watched or guarded
	ended   bool        // released: no more loss reports
	stopped error       // why nothing renews it any more (Close); ends ctx at once
}

// Holder is the lock kind that owns a hold, told by lose that the hold is
// lost after everything else knows it: the kind frees what the hold guarded
// locally (a RedisLock revokes its local mutex if goroutines queue).
type Holder interface {
	HoldLost(h *Hold)
	// KindName names the kind ("lock", "semaphore"), for the Observer.
	KindName() string
}

// drift is the safety margin subtracted from a hold's validity for clock
// drift between this process and Redis: 1% of the TTL plus 2ms, and at most
// a tenth of the TTL so that very short TTLs stay usable.
func drift(ttl time.Duration) time.Duration {
	return min(ttl/100+2*time.Millisecond, ttl/10)
}

func NewHold(r *Core, key, token string, fence int64, ttl time.Duration, deadline int64, kind Holder, proto Renewer) *Hold {
	h := &Hold{r: r, key: key, Token: token, Fence: fence, Kind: kind, Proto: proto}
	h.ttl.Store(int64(ttl))
	h.Deadline.Store(deadline)
	return h
}

// Key returns the Redis key of h.
func (h *Hold) Key() string { return h.key }

// TTL returns the key's time to live, to which each renewal resets it.
func (h *Hold) TTL() time.Duration { return time.Duration(h.ttl.Load()) }

// ValidUntil returns the deadline of a hold whose key got ttl from a
// command sent at sent.
func ValidUntil(sent int64, ttl time.Duration) int64 { return sent + int64(ttl-drift(ttl)) }

// Lost reports whether the hold was found gone or its deadline has passed.
// Loss is final: a renewal that completes later does not revive the hold.
func (h *Hold) Lost(now int64) bool {
	if h.lostFlag.Load() {
		return true
	}
	if now >= h.Deadline.Load() {
		h.lostFlag.Store(true)
		return true
	}
	return false
}

// Lose is the loss of h, written once: h is marked lost, whoever watches
// it (Lost, ExecuteLocked's context) hears of it, Stats counts it, the
// watchdog stops renewing it, and last its holder frees what it guarded.
// Every step is idempotent: a loss found twice (by the timer and by a
// renewal) is one loss.
func (h *Hold) Lose() {
	h.lostFlag.Store(true)
	h.mu.Lock()
	if h.cancel != nil && !h.ended {
		h.cancel(ErrLockLost)
	}
	h.mu.Unlock()
	h.CountLost()
	h.r.Watchdog.untrack(h)
	h.Kind.HoldLost(h)
}

// CountLost counts h lost in Stats, once, and tells OnLost then.
func (h *Hold) CountLost() {
	if h.r.Counters.lostOnce(&h.lostCounted) && h.r.OnLost != nil {
		h.r.OnLost(h)
	}
}

// renewed applies a renewal that set the key's TTL to ttl and was sent at
// sent: the hold's TTL becomes ttl and its deadline sent+ttl-drift, earlier
// or later than before (renewals are ordered by renewing). It reports
// whether the hold is still valid; a lost hold stays lost.
func (h *Hold) renewed(now, sent int64, ttl time.Duration) bool {
	d := ValidUntil(sent, ttl)
	for {
		cur := h.Deadline.Load()
		if h.lostFlag.Load() || now >= cur || now >= d {
			h.lostFlag.Store(true)
			return false
		}
		if h.Deadline.CompareAndSwap(cur, d) {
			h.ttl.Store(int64(ttl))
			if d < cur { // a shorter TTL: the timer must fire sooner
				h.rearm(time.Duration(d - now))
			}
			return true
		}
	}
}

// Watch returns a context cancelled with cause ErrLockLost when the hold is
// lost: at its deadline unless renewed first, or when lose is called. The
// first call arms the hold's timer, if guard has not; end disarms it.
func (h *Hold) Watch() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx != nil {
		// A deadline already passed counts at once, before the timer
		// runs: a holder that resumes from a pause must see it first.
		if !h.ended && h.stopped == nil && h.Lost(h.r.Now()) {
			h.cancel(ErrLockLost)
		}
		return h.ctx
	}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	switch {
	case h.lostFlag.Load(): // also when ended: a revoked hold, read in the revoke's window
		h.cancel(ErrLockLost)
	case h.ended:
	case h.stopped != nil:
		h.cancel(h.stopped)
	case h.Lost(h.r.Now()):
		h.cancel(ErrLockLost)
	default:
		h.arm()
	}
	return h.ctx
}

// Guard makes the hold's timer fire at its deadline (and at each later
// one) until it ends, so that a loss is found without a renewal or a
// watcher: a RedisLock guards its hold while goroutines queue behind it.
func (h *Hold) Guard() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.arm()
	}
}

// arm starts the timer at the deadline, once. mu must be held.
func (h *Hold) arm() {
	if h.timer == nil {
		h.timer = time.AfterFunc(time.Duration(h.Deadline.Load()-h.r.Now()), h.check)
	}
}

// check runs when the timer fires: the hold is lost if the deadline has
// passed; otherwise a renewal moved it and the timer is re-armed.
func (h *Hold) check() {
	now := h.r.Now()
	if h.Lost(now) {
		h.Lose()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ended {
		h.timer.Reset(time.Duration(h.Deadline.Load() - now))
	}
}

// orphan records that nothing renews h any more (its registry was closed)
// and ends its watch context with cause, ahead of the loss to come.
func (h *Hold) orphan(cause error) {
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

// shorten moves the deadline back to d if it is later (now is the
// registry clock), and sets the TTL to ttl; it reports whether the
// deadline moved.
func (h *Hold) shorten(now, d int64, ttl time.Duration) bool {
	h.ttl.Store(int64(ttl))
	for {
		cur := h.Deadline.Load()
		if d >= cur {
			return false
		}
		if h.Deadline.CompareAndSwap(cur, d) {
			h.rearm(time.Duration(max(d-now, 0)))
			return true
		}
	}
}

// rearm makes an armed timer fire in d, for a deadline that moved earlier.
func (h *Hold) rearm(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil && !h.ended {
		h.timer.Reset(d)
	}
}

// Retire stops caring about h: the watchdog stops renewing it, its timer
// stops, and it reports no more loss. Safe to repeat.
func (h *Hold) Retire() {
	h.r.Watchdog.untrack(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
}

// Released reports whether retire was called.
func (h *Hold) Released() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// LostAtRelease returns ErrLockLost if h's validity ended before its
// release: another holder may have had its key meanwhile.
func (h *Hold) LostAtRelease() error {
	if h.Lost(h.r.Now()) {
		return fmt.Errorf("%w: validity of %q ended before release", ErrLockLost, h.key)
	}
	return nil
}

// End ends h for good after its holder's turn ended with err (a release, a
// pass, a failure): h is retired, and a loss that err reports is counted
// once (Stats, the Observer). It returns err. Every kind's teardown starts
// here.
func (h *Hold) End(err error) error {
	h.Retire()
	if errors.Is(err, ErrLockLost) {
		h.CountLost()
	}
	return err
}

// ReleaseErr is the outcome of a release of h, the same rule for every
// kind: done says that the key (or permit) was h's and is given back; first
// is the network error of an earlier attempt after which the release may
// have run (a retried release, or the pass it replaces), or nil; err is the
// final error, which failed counts and wraps (ErrReleaseFailed); gone makes
// the loss to report when the key was not h's.
//
// A key found gone at a retry while h is still valid was given back by
// that earlier attempt (or passed on by the pass): its TTL had not run out.
// That is no loss, and Release then agrees with Lost, which does not close
// either; unless the server lost the registry's keys meanwhile
// (Core.ServerLost: a restart without persistence, a failover, FLUSHALL,
// the very faults that leave pooled connections stale), when the key may
// have been lost while h was valid. A key lost alone (an eviction,
// lockyard release --force) and held by nobody at the retry still counts
// as given back: renewals (WithAutoRenew) and fencing tokens cover that.
// Once h's validity has ended, a key found gone is reported lost, saying
// that the first attempt may have given it back.
func (h *Hold) ReleaseErr(ctx context.Context, done bool, first, err error, failed func(error) error, gone func() error) error {
	switch {
	case err != nil:
		return Join(failed(err), h.LostAtRelease())
	case done:
		return h.LostAtRelease()
	case first == nil:
		return gone()
	case h.r.ServerLost != nil && h.r.ServerLost(ctx):
		return fmt.Errorf("%w (at a retried release, after the first attempt failed with %w: the server lost its keys meanwhile)", gone(), first)
	case !h.Lost(h.r.Now()):
		return nil
	}
	return fmt.Errorf("%w (at a retried release: the first attempt failed with %w and may have given it back)", gone(), first)
}
