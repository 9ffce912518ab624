package registry

import (
	"slices"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// WaitBuckets are the upper bounds of the wait-time histogram in Stats, a
// copy for the caller to read: the registry counts with its own, so
// changing this slice changes nothing.
var WaitBuckets = slices.Clone(core.WaitBounds[:])

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

// snapshot reads the counters s one by one, for Registry.Stats.
func snapshot(s *core.Counters, cachedLocks int) Stats {
	out := Stats{
		Acquisitions: s.Acquisitions.Load(),
		Contended:    s.Contended.Load(),
		Waits:        s.Waits.Load(),
		WaitSum:      time.Duration(s.WaitSum.Load()),
		WaitCounts:   make([]uint64, len(core.WaitBounds)),
		Renewals:     s.Renewals.Load(),
		LostLocks:    s.Lost.Load(),
		RedisErrors:  s.RedisErrors.Load(),
		CachedLocks:  cachedLocks,
	}
	var cum uint64
	for i := range core.WaitBounds {
		cum += s.WaitCounts[i].Load()
		out.WaitCounts[i] = cum
	}
	return out
}
