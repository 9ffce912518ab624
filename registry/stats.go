package registry

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// WaitBuckets are the upper bounds of the wait-time histogram in Stats, a
// copy for the caller to read: the registry counts with its own, so
// changing this slice changes nothing.
var WaitBuckets = slices.Clone(core.WaitBounds[:])

// HoldBuckets are the upper bounds of the hold-time histogram in Stats, a
// copy as WaitBuckets is.
var HoldBuckets = slices.Clone(core.HoldBounds[:])

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
	// Waits counts the acquisitions by Lock, LockContext, ExecuteLocked,
	// Acquire and Semaphore.Acquire (TryLock and the TryAcquires never
	// wait), WaitSum their total wait, and WaitCounts[i]
	// those that waited at most WaitBuckets[i] (cumulative, as a Prometheus
	// histogram's buckets; Waits is the +Inf bucket).
	Waits      uint64
	WaitSum    time.Duration
	WaitCounts []uint64
	// Holds counts the outermost acquisitions that ended (an Unlock, a
	// Release or ReleaseAfter, a hand-over to the next goroutine, a
	// revocation), HoldSum their total time held, and HoldCounts[i] those
	// held at most HoldBuckets[i] (cumulative, as WaitCounts).
	Holds      uint64
	HoldSum    time.Duration
	HoldCounts []uint64
	// Held is the number of outermost acquisitions held now (goroutine
	// holds, leases, permits), and Waiting the number of calls waiting now
	// (Lock, LockContext, Acquire, Semaphore.Acquire): gauges.
	Held, Waiting int64
	// NotObtained counts TryLock, TryLockContext, TryAcquire and
	// Semaphore.TryAcquire calls that found the lock or every permit
	// taken; GaveUp the waits that ended with their context;
	// ReleaseFailed the releases that failed in Redis (ErrReleaseFailed:
	// the key expires by its TTL).
	NotObtained, GaveUp, ReleaseFailed uint64
	// Renewals counts successful renewals, by the watchdog or RenewLock,
	// and RenewalsFailed those that failed (the hold stays valid until its
	// deadline; one that found the key gone counts in LostLocks).
	Renewals, RenewalsFailed uint64
	// LostLocks counts holds lost before their release: the key was found
	// gone or taken, or the validity ended.
	LostLocks uint64
	// RedisErrors counts failed Redis calls (each retry counts), except
	// those cut short by a cancelled context.
	RedisErrors uint64
	// NativeFallbacks counts the renewals and releases that were to run
	// as a server's native command (SET IFEQ, DELEX, DELIFEQ: Redis 8.4+,
	// Valkey) and ran as a script instead, because the server refused
	// the command (unknown, NOPERM) or its reply was an error. The first
	// one is logged at info level.
	NativeFallbacks uint64
	// CachedLocks is the number of locks in the cache now.
	CachedLocks int
}

// snapshot reads the counters s one by one, for Registry.Stats.
func snapshot(s *core.Counters, cachedLocks int) Stats {
	// The buckets before the counts, which are bumped first (Counters):
	// no bucket reads above its histogram's count.
	waits, holds := cumulative(s.WaitCounts, len(core.WaitBounds)), cumulative(s.HoldCounts, len(core.HoldBounds))
	return Stats{
		Acquisitions: s.Acquisitions.Load(),
		Contended:    s.Contended.Load(),
		Waits:        s.Waits.Load(),
		WaitSum:      time.Duration(s.WaitSum.Load()),
		WaitCounts:   waits,
		Renewals:     s.Renewals.Load(),
		LostLocks:    s.Lost.Load(),
		RedisErrors:  s.RedisErrors.Load(),
		CachedLocks:  cachedLocks,

		Holds:          s.Holds.Load(),
		HoldSum:        time.Duration(s.HoldSum.Load()),
		HoldCounts:     holds,
		Held:           s.Held.Load(),
		Waiting:        s.Waiting.Load(),
		NotObtained:    s.NotObtained.Load(),
		GaveUp:         s.GaveUp.Load(),
		ReleaseFailed:  s.ReleaseFailed.Load(),
		RenewalsFailed: s.RenewalsFailed.Load(),

		NativeFallbacks: s.NativeFallbacks.Load(),
	}
}

// cumulative returns the first n of the per-bucket counts c, summed up
// bucket by bucket (as a Prometheus histogram's).
func cumulative(c []atomic.Uint64, n int) []uint64 {
	out := make([]uint64, n)
	var sum uint64
	for i := range out {
		sum += c[i].Load()
		out[i] = sum
	}
	return out
}
