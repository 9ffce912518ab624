package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// kindOf names the kind whose holds h is of.
func kindOf(h *core.Hold) string { return h.Kind.KindName() }

// observing counts in Stats and tells the Observer (nil: none) what a
// registry's acquisitions do.
type observing struct {
	c *core.Core
	o *Observer
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
func (r observing) waiting(kind, key string) {
	r.c.Counters.Waiting.Add(1)
	if o := r.o; o != nil && o.Waiting != nil {
		o.Waiting(Event{Key: key, Kind: kind})
	}
}

// waited ends a wait (waiting) that ended with err (nil: acquired): one
// ended by its context gave up.
func (r observing) waited(err error) {
	r.c.Counters.Waiting.Add(-1)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		r.c.Counters.GaveUp.Add(1)
	}
}

// tried counts an attempt that does not wait and failed with err:
// ErrNotObtained when the lock or every permit was taken.
func (r observing) tried(err error) {
	if errors.Is(err, ErrNotObtained) {
		r.notObtained()
	}
}

// notObtained counts an attempt that found the lock or every permit taken.
func (r observing) notObtained() { r.c.Counters.NotObtained.Add(1) }

// acquired counts an outermost acquisition of h (wait < 0: one that does
// not wait), and returns when it began, for released.
func (r observing) acquired(kind, key string, h *core.Hold, contended bool, wait time.Duration) int64 {
	r.c.Counters.Acquired(contended, wait)
	if o := r.o; o != nil && o.Acquired != nil {
		e := event(kind, key, h)
		e.Wait = max(wait, 0)
		o.Acquired(e)
	}
	return r.c.Now()
}

// released counts the end of an outermost acquisition of h that began at
// since (acquired), and tells the Observer.
func (r observing) released(kind, key string, h *core.Hold, since int64) {
	if e, tell := r.end(kind, key, h, since); tell {
		r.o.Released(e)
	}
}

// releasedLater is released for a revocation, which runs with a hold's
// locks held: the Observer is told from a goroutine of the registry.
func (r observing) releasedLater(kind, key string, h *core.Hold, since int64) {
	if e, tell := r.end(kind, key, h, since); tell {
		r.c.BG.Spawn(func() { r.o.Released(e) })
	}
}

// end counts the end of an acquisition that began at since, and returns
// its Event if the Observer is to be told.
func (r observing) end(kind, key string, h *core.Hold, since int64) (Event, bool) {
	held := time.Duration(r.c.Now() - since)
	r.c.Counters.Released(held)
	if r.o == nil || r.o.Released == nil {
		return Event{}, false
	}
	e := event(kind, key, h)
	e.Held = held
	return e, true
}

// lost tells the Observer, from a goroutine of the registry, that h was
// lost (core.Core.OnLost: once, when Stats counts it).
func (r observing) lost(h *core.Hold) {
	if o := r.o; o != nil && o.Lost != nil {
		e := event(kindOf(h), h.Key(), h)
		r.c.BG.Spawn(func() { o.Lost(e) })
	}
}

// renewalFailed tells the Observer, from a goroutine of the registry, that
// a renewal of h failed with err (core.Core.OnRenewalFailed).
func (r observing) renewalFailed(h *core.Hold, err error) {
	if o := r.o; o != nil && o.RenewalFailed != nil {
		e := event(kindOf(h), h.Key(), h)
		e.Err = err
		r.c.BG.Spawn(func() { o.RenewalFailed(e) })
	}
}
