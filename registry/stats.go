package registry

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

// waitBuckets are the upper bounds of the wait-time histogram in Stats.
var waitBuckets = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second,
}

// WaitBuckets are the upper bounds of the wait-time histogram in Stats, a
// copy for the caller to read: the registry counts with its own, so
// changing this slice changes nothing.
var WaitBuckets = slices.Clone(waitBuckets[:])

// Stats is a snapshot of a registry's counters since New, from
// Registry.Stats. Counters only grow; export them as Prometheus counters
// (examples/prometheus does).
type Stats struct {
	// Acquisitions counts outermost acquisitions (reentrant ones do not
	// count): from Redis, or handed over by a goroutine of this registry.
	Acquisitions uint64
	// Contended counts the acquisitions that waited for another holder:
	// queued behind a goroutine of this registry, or after a failed attempt
	// in Redis.
	Contended uint64
	// Waits counts the acquisitions by Lock, LockContext and ExecuteLocked
	// (TryLock never waits), WaitSum their total wait, and WaitCounts[i]
	// those that waited at most WaitBuckets[i] (cumulative, as a Prometheus
	// histogram's buckets; Waits is the +Inf bucket).
	Waits      uint64
	WaitSum    time.Duration
	WaitCounts []uint64
	// Renewals counts successful renewals, by the watchdog or RenewLock.
	Renewals uint64
	// LostLocks counts holds lost before their release: the key was found
	// gone or taken, or the validity ended.
	LostLocks uint64
	// RedisErrors counts failed Redis calls (each retry counts), except
	// those cut short by a cancelled context.
	RedisErrors uint64
	// CachedLocks is the number of locks in the cache now.
	CachedLocks int
}

// stats holds a registry's counters.
type stats struct {
	acquisitions, contended, renewals, lost, redisErrors atomic.Uint64
	waits                                                atomic.Uint64
	waitSum                                              atomic.Int64
	waitCounts                                           []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
}

func newStats() *stats {
	return &stats{waitCounts: make([]atomic.Uint64, len(waitBuckets)+1)}
}

// snapshot reads the counters one by one, for Registry.Stats.
func (s *stats) snapshot(cachedLocks int) Stats {
	out := Stats{
		Acquisitions: s.acquisitions.Load(),
		Contended:    s.contended.Load(),
		Waits:        s.waits.Load(),
		WaitSum:      time.Duration(s.waitSum.Load()),
		WaitCounts:   make([]uint64, len(waitBuckets)),
		Renewals:     s.renewals.Load(),
		LostLocks:    s.lost.Load(),
		RedisErrors:  s.redisErrors.Load(),
		CachedLocks:  cachedLocks,
	}
	var cum uint64
	for i := range waitBuckets {
		cum += s.waitCounts[i].Load()
		out.WaitCounts[i] = cum
	}
	return out
}

// acquired counts an outermost acquisition; wait >= 0 is how long a
// waiting call waited (-1: TryLock).
func (s *stats) acquired(contended bool, wait time.Duration) {
	s.acquisitions.Add(1)
	if contended {
		s.contended.Add(1)
	}
	if wait < 0 {
		return
	}
	i := 0
	for i < len(waitBuckets) && wait > waitBuckets[i] {
		i++
	}
	s.waitCounts[i].Add(1)
	s.waitSum.Add(int64(wait))
	s.waits.Add(1)
}

// redisError counts err if it is a failed Redis call.
func (s *stats) redisError(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		s.redisErrors.Add(1)
	}
}

// lostOnce counts a lost hold, once: counted records that it was.
func (s *stats) lostOnce(counted *atomic.Bool) {
	if counted.CompareAndSwap(false, true) {
		s.lost.Add(1)
	}
}
