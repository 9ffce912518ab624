package registry_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// A holder that crashed (its registry gone without a release) keeps its
// permit only until its TTL runs out, by the server's clock: the next
// attempt prunes it.
func TestSemaphoreCrashedHolderPermitComesBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		crashed := newRegPrefix(t, b.pool(t), pfx)
		const ttl = 300 * time.Millisecond
		_, err := semaphore(t, crashed, "k", 1).Acquire(bg(t), ttl)
		mustNil(t, err)
		start := time.Now()
		crashed.Close() // no release: the permit stays in Redis
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k", 1)
		le := recvWithin(t, acquirePermit(bg(t), s, 0), 5*time.Second, "the crashed holder's permit")
		took := time.Since(start)
		t.Logf("permit back after %v (TTL %v)", took, ttl)
		if le == nil || took < ttl-50*time.Millisecond || took > ttl+time.Second {
			t.Fatalf("lease %v after %v, want one after about the TTL %v", le, took, ttl)
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// A permit whose validity ends is lost: Lost closes, a lease waiting in the
// same registry gets the local place (its permit comes from Redis, where
// the lost one expired), and the lost lease's Release says ErrLockLost.
func TestSemaphoreLostPermit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithFencing())
		s := semaphore(t, r, "k", 1)
		a, err := s.Acquire(bg(t), 100*time.Millisecond)
		mustNil(t, err)
		next := acquirePermit(bg(t), s, time.Second)
		recvWithin(t, a.Lost(), 5*time.Second, "Lost of an expired permit")
		c := recvWithin(t, next, 5*time.Second, "the waiting lease, after the loss")
		if c == nil || c.Token() <= a.Token() && a.Token() != 0 {
			t.Fatalf("lease %v after a loss", c)
		}
		mustIs(t, a.Release(bg(t)), registry.ErrLockLost)
		if st := r.Stats(); st.LostLocks != 1 {
			t.Errorf("LostLocks %d, want 1", st.LostLocks)
		}
		mustNil(t, c.Release(bg(t)))
	})
}

// WithAutoRenew renews permits: a lease held for several TTLs keeps its
// permit and is not lost, and Renew moves its expiry by hand.
func TestSemaphoreRenewed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithAutoRenew())
		s := semaphore(t, r, "k", 2)
		le, err := s.Acquire(bg(t), 150*time.Millisecond)
		mustNil(t, err)
		first := score(t, b, s.Key())
		notWithin(t, le.Lost(), 600*time.Millisecond, "Lost of a renewed permit")
		if later := score(t, b, s.Key()); later <= first {
			t.Fatalf("expiry %d after renewals, was %d", later, first)
		}
		if r.Stats().Renewals == 0 {
			t.Error("no renewal counted")
		}
		mustNil(t, le.Renew(bg(t), 10*time.Second))
		if left := score(t, b, s.Key()) - first; left < 9000 {
			t.Errorf("Renew(10s) moved the expiry by %dms", left)
		}
		mustNil(t, le.Release(bg(t)))
		mustIs(t, le.Renew(bg(t), 0), registry.ErrNotOwner)
	})
}

// score returns the expiry (server ms) of the first permit of key.
func score(t *testing.T, b *backend, key string) int64 {
	t.Helper()
	v, err := redis.Strings(b.do(t, "ZRANGE", key, 0, 0, "WITHSCORES"), nil)
	if err != nil || len(v) != 2 {
		t.Fatalf("ZRANGE %s: %v %v", key, v, err)
	}
	n, err := strconv.ParseInt(v[1], 10, 64)
	mustNil(t, err)
	return n
}

// ReleaseAfter leaves the permit taken for d: nobody gets it sooner, and
// it is free after d.
func TestSemaphoreReleaseAfter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 1)
		le, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		start := time.Now()
		mustNil(t, le.ReleaseAfter(bg(t), 300*time.Millisecond))
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 1)
		_, err = other.TryAcquire(bg(t), 0)
		mustIs(t, err, registry.ErrNotObtained)
		c := recvWithin(t, acquirePermit(bg(t), other, 0), 5*time.Second, "the permit after ReleaseAfter")
		if took := time.Since(start); c == nil || took < 250*time.Millisecond {
			t.Fatalf("lease %v after %v, want one after 300ms", c, took)
		}
		mustNil(t, c.Release(bg(t)))
	})
}

// A waiter that gives up leaves the wait queue: once the holder leaves too,
// no key of the semaphore is left.
func TestSemaphoreNoKeysLeft(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithFencing()), "k", 1)
		le, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithFencing(), registry.WithLockType(registry.PubSubLock)), "k", 1)
		ctx, cancel := contextWithTimeout(t, 200*time.Millisecond)
		defer cancel()
		_, err = other.Acquire(ctx, 0)
		mustIs(t, err, context.DeadlineExceeded) // ctx.Err() may still be nil: the wait ends at the deadline, not at the timer
		mustNil(t, le.Release(bg(t)))
		assertNoKeys(t, b, pfx)
	})
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(bg(t), d)
}
