package core

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// WaitBounds are the upper bounds of the wait-time histogram in Stats.
var WaitBounds = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second,
}

// HoldBounds are the upper bounds of the hold-time histogram in Stats.
var HoldBounds = [...]time.Duration{
	time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute,
}

// Counters holds a registry's counters (registry.Stats).
type Counters struct {
	Acquisitions, Contended, Renewals, Lost, RedisErrors atomic.Uint64
	Waits                                                atomic.Uint64
	WaitSum                                              atomic.Int64
	WaitCounts                                           []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	// Outcomes other than an acquisition: a TryLock that found the key
	// taken, a wait ended by its context, a release or renewal that failed.
	NotObtained, GaveUp, ReleaseFailed, RenewalsFailed atomic.Uint64
	// Renewals and releases that a native command could not serve.
	NativeFallbacks atomic.Uint64
	// Gauges: outermost acquisitions held now, and calls waiting now.
	Held, Waiting atomic.Int64
	// The hold-time histogram, as the wait-time one.
	Holds      atomic.Uint64
	HoldSum    atomic.Int64
	HoldCounts []atomic.Uint64
}

func NewCounters() *Counters {
	return &Counters{WaitCounts: make([]atomic.Uint64, len(WaitBounds)+1), HoldCounts: make([]atomic.Uint64, len(HoldBounds)+1)}
}

// Released counts the release of an outermost acquisition held for held.
func (s *Counters) Released(held time.Duration) {
	s.Held.Add(-1)
	i := 0
	for i < len(HoldBounds) && held > HoldBounds[i] {
		i++
	}
	s.Holds.Add(1) // before the bucket: a snapshot reads buckets first, and never sees one above the count
	s.HoldSum.Add(int64(held))
	s.HoldCounts[i].Add(1)
}

// Acquired counts an outermost acquisition; wait >= 0 is how long a
// waiting call waited (-1: TryLock).
func (s *Counters) Acquired(contended bool, wait time.Duration) {
	s.Acquisitions.Add(1)
	s.Held.Add(1)
	if contended {
		s.Contended.Add(1)
	}
	if wait < 0 {
		return
	}
	i := 0
	for i < len(WaitBounds) && wait > WaitBounds[i] {
		i++
	}
	s.Waits.Add(1) // as in Released
	s.WaitSum.Add(int64(wait))
	s.WaitCounts[i].Add(1)
}

// RedisError counts err if it is a failed Redis call.
func (s *Counters) RedisError(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		s.RedisErrors.Add(1)
	}
}

// lostOnce counts a lost hold, once: counted records that it was. It
// reports whether this call counted it.
func (s *Counters) lostOnce(counted *atomic.Bool) bool {
	if counted.CompareAndSwap(false, true) {
		s.Lost.Add(1)
		return true
	}
	return false
}
