package registry_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Obtain returns the same instance while cached; a full cache evicts the
// least recently used unheld lock.
func TestCacheLRU(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithCacheCapacity(3))
		la, lb, lc := obtain(t, r, "a"), obtain(t, r, "b"), obtain(t, r, "c")
		if obtain(t, r, "a") != la { // also makes a the most recently used
			t.Fatal("Obtain of a cached key returned a new instance")
		}
		obtain(t, r, "d") // evicts b, the least recently used
		if r.IsCached("b") || !r.IsCached("a") || !r.IsCached("c") || !r.IsCached("d") {
			t.Fatalf("after inserting d: a=%v b=%v c=%v d=%v, want b evicted",
				r.IsCached("a"), r.IsCached("b"), r.IsCached("c"), r.IsCached("d"))
		}
		if r.CacheLen() != 3 {
			t.Fatalf("cache holds %d locks, capacity 3", r.CacheLen())
		}
		// Locking counts as use: c becomes newer than a.
		mustNil(t, lc.LockContext(bg(t)))
		mustNil(t, lc.UnlockContext(bg(t)))
		obtain(t, r, "e") // evicts a
		if r.IsCached("a") || !r.IsCached("c") {
			t.Fatal("locking did not refresh c's place in the LRU order")
		}
		if obtain(t, r, "b") == lb {
			t.Fatal("an evicted key came back as the old instance")
		}
	})
}

// Held locks are never evicted (waiters count too: see reentrant.Busy); a full cache of them gives
// ErrCacheFull for new keys but never for cached ones.
func TestCacheFull(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithCacheCapacity(2))
		la, lb := obtain(t, r, "a"), obtain(t, r, "b")
		la.Lock()
		hb, ok := holdIn(t, lb)
		if !ok {
			t.Fatal("TryLock of b failed")
		}
		_, err := r.Obtain("c")
		mustIs(t, err, registry.ErrCacheFull)
		if obtain(t, r, "a") != la || obtain(t, r, "b") != lb {
			t.Fatal("cached keys must be obtainable when the cache is full")
		}
		la.Unlock() // a is now the only evictable lock
		obtain(t, r, "c")
		if r.IsCached("a") || !r.IsCached("b") {
			t.Fatal("evicted a lock that was held or waited for")
		}
		mustNil(t, hb.unlock())
	})
}

// ExpireUnusedOlderThan never removes a held lock, removes unheld ones, and
// racing it with Obtain/Lock never breaks mutual exclusion (run with -race).
func TestExpireUnusedOlderThan(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		held, idle := obtain(t, r, "held"), obtain(t, r, "idle")
		held.Lock()
		r.ExpireUnusedOlderThan(time.Hour)
		if !r.IsCached("idle") {
			t.Fatal("removed a lock used less than an hour ago")
		}
		r.ExpireUnusedOlderThan(-1)
		if !r.IsCached("held") || r.IsCached("idle") {
			t.Fatal("ExpireUnusedOlderThan(-1) must drop exactly the unheld locks")
		}
		if obtain(t, r, "held") != held || obtain(t, r, "idle") == idle {
			t.Fatal("wrong instances after expiry")
		}
		held.Unlock()
	})
}

func TestExpireUnusedRacesObtainAndLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithIdleBetweenTries(time.Millisecond))
		const workers, iters = 8, 25
		counters := make([]int, 2)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					r.ExpireUnusedOlderThan(-1)
				}
			}
		}()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := w % 2
				for range iters {
					l, err := r.Obtain([]string{"x", "y"}[k])
					if err != nil {
						t.Error(err)
						return
					}
					l.Lock()
					counters[k]++ // data race unless mutually exclusive
					l.Unlock()
				}
			}()
		}
		wg.Wait()
		close(stop)
		if counters[0]+counters[1] != workers*iters {
			t.Fatalf("counters %v, want a total of %d", counters, workers*iters)
		}
		for _, k := range []string{"x", "y"} {
			if n, _ := redis.Int(b.do(t, "EXISTS", obtain(t, r, k).Key()), nil); n != 0 {
				t.Fatalf("key %s left in Redis", k)
			}
		}
	})
}
