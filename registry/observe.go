package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// Observer is told what a registry's acquisitions do, for tracing and
// metrics beyond Stats (the module github.com/lockyard/lockyard/otel is
// one). Waiting, Acquired and Released run on the goroutine where the
// event happened, with no lock of the registry held; Lost, RenewalFailed
// and the Released of a revoked hold are found with a hold's locks held,
// and run on a goroutine of the registry instead (none after Close). The
// functions must not block: record what is needed and return. A nil
// function is skipped, and a registry without an Observer builds no
// Event. An Event's Token names the hold in Redis, which a local hand-off
// passes to the next goroutine: the Lost of a hold may follow the Released
// of the acquisition that handed it on.
type Observer struct {
	// Waiting: a Lock, LockContext, Acquire or Semaphore.Acquire begins
	// (it may get the lock at once, re-enter it, or fail: a wait that
	// fails has no event of its own; Stats counts it).
	Waiting func(Event)
	// Acquired: an outermost acquisition, with how long it waited (Wait;
	// 0 for TryLock and TryAcquire).
	Acquired func(Event)
	// Released: the end of an outermost acquisition (an Unlock, a
	// Release, a hand-over to the next goroutine, or a revocation), with
	// how long it was held (Held).
	Released func(Event)
	// Lost: a hold lost before its release (its validity ended, or a
	// renewal or the release found its key gone), once per hold, as
	// Stats.LostLocks counts it.
	Lost func(Event)
	// RenewalFailed: a renewal failed with Err; the hold stays valid until
	// its deadline.
	RenewalFailed func(Event)
}

// Event is what an Observer is told.
type Event struct {
	Key   string        // the Redis key
	Kind  string        // "lock" (a RedisLock or its Lease) or "semaphore"
	Token string        // the value in Redis ("" while waiting)
	Fence int64         // the fencing token (0 without WithFencing)
	Wait  time.Duration // Acquired: how long it waited
	Held  time.Duration // Released: how long it was held
	Err   error         // RenewalFailed: why
}

// WithObserver makes o told of every acquisition's events (see Observer).
func WithObserver(o Observer) Option {
	return func(c *config) error {
		c.observer = &o
		return nil
	}
}

// Kinds of Event.
const (
	kindLock      = "lock"
	kindSemaphore = "semaphore"
)

// kindOf names the kind whose holds h is of.
func kindOf(h *core.Hold) string {
	if _, ok := h.Kind.(*permit); ok {
		return kindSemaphore
	}
	return kindLock
}

// event returns the Event of h (nil: none yet).
func event(kind, key string, h *core.Hold) Event {
	e := Event{Key: key, Kind: kind}
	if h != nil {
		e.Token, e.Fence = h.Token, h.Fence
	}
	return e
}

// waiting counts a call that begins to wait; waited ends it.
func (r *Registry) waiting(kind, key string) {
	r.core.Counters.Waiting.Add(1)
	if o := r.cfg.observer; o != nil && o.Waiting != nil {
		o.Waiting(Event{Key: key, Kind: kind})
	}
}

// waited ends a wait (waiting) that ended with err (nil: acquired): one
// ended by its context gave up.
func (r *Registry) waited(err error) {
	r.core.Counters.Waiting.Add(-1)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		r.core.Counters.GaveUp.Add(1)
	}
}

// tried counts an attempt that does not wait and failed with err:
// ErrNotObtained when the lock or every permit was taken.
func (r *Registry) tried(err error) {
	if errors.Is(err, ErrNotObtained) {
		r.core.Counters.NotObtained.Add(1)
	}
}

// acquired counts an outermost acquisition of h (wait < 0: one that does
// not wait), and returns when it began, for released.
func (r *Registry) acquired(kind, key string, h *core.Hold, contended bool, wait time.Duration) int64 {
	r.core.Counters.Acquired(contended, wait)
	if o := r.cfg.observer; o != nil && o.Acquired != nil {
		e := event(kind, key, h)
		e.Wait = max(wait, 0)
		o.Acquired(e)
	}
	return r.core.Now()
}

// released counts the end of an outermost acquisition of h that began at
// since (acquired), and tells the Observer.
func (r *Registry) released(kind, key string, h *core.Hold, since int64) {
	held := time.Duration(r.core.Now() - since)
	r.core.Counters.Released(held)
	if o := r.cfg.observer; o != nil && o.Released != nil {
		e := event(kind, key, h)
		e.Held = held
		o.Released(e)
	}
}

// releasedLater is released for a revocation, which runs with a hold's
// locks held: the Observer is told from a goroutine of the registry.
func (r *Registry) releasedLater(kind, key string, h *core.Hold, since int64) {
	held := time.Duration(r.core.Now() - since)
	r.core.Counters.Released(held)
	if o := r.cfg.observer; o != nil && o.Released != nil {
		e := event(kind, key, h)
		e.Held = held
		r.core.BG.Spawn(func() { o.Released(e) })
	}
}

// lost tells the Observer, from a goroutine of the registry, that h was
// lost (core.Core.OnLost: once, when Stats counts it).
func (r *Registry) lost(h *core.Hold) {
	if o := r.cfg.observer; o != nil && o.Lost != nil {
		e := event(kindOf(h), h.Key(), h)
		r.core.BG.Spawn(func() { o.Lost(e) })
	}
}

// renewalFailed tells the Observer, from a goroutine of the registry, that
// a renewal of h failed with err (core.Core.OnRenewalFailed).
func (r *Registry) renewalFailed(h *core.Hold, err error) {
	if o := r.cfg.observer; o != nil && o.RenewalFailed != nil {
		e := event(kindOf(h), h.Key(), h)
		e.Err = err
		r.core.BG.Spawn(func() { o.RenewalFailed(e) })
	}
}
