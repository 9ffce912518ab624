package registry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

func TestStats(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithExpireAfter(time.Second), registry.WithIdleBetweenTries(5*time.Millisecond))
		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(5*time.Millisecond))
		l1 := obtain(t, r1, "k")
		for range 3 {
			mustNil(t, l1.LockContext(bg(t)))
			mustNil(t, l1.LockContext(bg(t))) // reentrant: not counted
			mustNil(t, l1.UnlockContext(bg(t)))
			mustNil(t, l1.UnlockContext(bg(t)))
		}
		s := r1.Stats()
		if s.Acquisitions != 3 || s.Contended != 0 || s.Waits != 3 || s.CachedLocks != 1 || s.RedisErrors != 0 {
			t.Fatalf("after 3 uncontended locks: %+v", s)
		}
		if n := len(s.WaitCounts); n != len(registry.WaitBuckets) || s.WaitCounts[n-1] != 3 || s.WaitSum <= 0 {
			t.Fatalf("wait histogram %v, sum %v", s.WaitCounts, s.WaitSum)
		}

		// A lock held by another registry: r2 waits, and says so.
		h, ok := holdIn(t, l1)
		if !ok {
			t.Fatal("TryLock failed")
		}
		l2 := obtain(t, r2, "k")
		got := lockInBackground(t, l2)
		waitQueued(t, b, l1, 1)
		mustNil(t, h.unlock())
		mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter"))
		if s := r2.Stats(); s.Acquisitions != 1 || s.Contended != 1 || s.Waits != 1 {
			t.Fatalf("the waiting registry: %+v", s)
		}
		// TryLock counted as an acquisition, not a wait; RenewLock as a renewal.
		if s := r1.Stats(); s.Acquisitions != 4 || s.Waits != 3 {
			t.Fatalf("after TryLock: %+v", s)
		}
		mustNil(t, l1.LockContext(bg(t)))
		mustNil(t, r1.RenewLock(bg(t), "k"))
		if s := r1.Stats(); s.Renewals != 1 {
			t.Fatalf("after RenewLock: %+v", s)
		}
		// A hold that runs out is counted lost once, whoever notices.
		lost := l1.Lost()
		b.expire(t, l1.Key(), time.Second)
		recvWithin(t, lost, 3*time.Second, "the loss")
		mustIs(t, l1.UnlockContext(bg(t)), registry.ErrLockLost)
		if s := r1.Stats(); s.LostLocks != 1 {
			t.Fatalf("after a loss: %+v", s)
		}

		// Acquire and Semaphore.Acquire count as waits (Stats.Waits), the
		// TryAcquires do not.
		r3 := newRegPrefix(t, b.pool(t), pfx)
		le, err := r3.Acquire(bg(t), "lease", 0)
		mustNil(t, err)
		mustNil(t, le.Release(bg(t)))
		le, err = r3.TryAcquire(bg(t), "lease", 0)
		mustNil(t, err)
		mustNil(t, le.Release(bg(t)))
		s3 := semaphore(t, r3, "sem", 2)
		le, err = s3.Acquire(bg(t), 0)
		mustNil(t, err)
		mustNil(t, le.Release(bg(t)))
		le, err = s3.TryAcquire(bg(t), 0)
		mustNil(t, err)
		mustNil(t, le.Release(bg(t)))
		if s := r3.Stats(); s.Acquisitions != 4 || s.Waits != 2 {
			t.Fatalf("after Acquire, TryAcquire, Semaphore.Acquire and TryAcquire: %+v, want 4 acquisitions, 2 waits", s)
		}
	})
}

func TestStatsRedisErrors(t *testing.T) {
	b := realBackend()
	fc := &faultyClient{Client: registry.NewPoolClient(b.pool(t)), script: "obtain", n: 2, err: errors.New("injected network error")}
	r := newRegClient(t, fc, registry.WithLogger(discardLogger))
	l := obtain(t, r, "k")
	mustNil(t, l.LockContext(bg(t)))
	mustNil(t, l.UnlockContext(bg(t)))
	if s := r.Stats(); s.RedisErrors != 2 || s.Acquisitions != 1 {
		t.Fatalf("stats %+v, want 2 Redis errors and 1 acquisition", s)
	}
}
