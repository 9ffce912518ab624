package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Spring: lock and unlock many times; the key exists exactly while held.
func TestLockUnlockManyTimes(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "foo")
		for range 50 {
			l.Lock()
			if v, _ := redis.String(b.do(t, "GET", l.Key()), nil); !strings.Contains(v, ":") {
				t.Fatalf("held key has value %q, want a token", v)
			}
			l.Unlock()
			if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
				t.Fatal("key still exists after Unlock")
			}
		}
	})
}

// The stored value differs between acquisitions and carries a millisecond TTL
// of expireAfter; Key is registryKey:key.
func TestWireFormat(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newRegPrefix(t, b.pool(t), "orders", registry.WithExpireAfter(7*time.Second))
		l := obtain(t, r, "42")
		if l.Key() != "orders:42" {
			t.Fatalf("Key() = %q, want orders:42", l.Key())
		}
		seen := map[string]bool{}
		for range 3 {
			mustNil(t, l.LockContext(bg(t)))
			v, _ := redis.String(b.do(t, "GET", "orders:42"), nil)
			if len(v) != 36+1+16 || seen[v] {
				t.Fatalf("token %q is short or repeated", v)
			}
			seen[v] = true
			pttl, _ := redis.Int64(b.do(t, "PTTL", "orders:42"), nil)
			if pttl <= 6000 || pttl > 7000 {
				t.Fatalf("PTTL = %d, want about 7000", pttl)
			}
			mustNil(t, l.UnlockContext(bg(t)))
		}
	})
}

// Spring: reentrant locking; nested acquisitions send no command, and an
// uncontended Lock+Unlock costs exactly its SET and its release (a script,
// or a native delete pipelined with PUBLISH and EXISTS).
func TestReentrantCostsNoCommands(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newReg(t, cp)
		l := obtain(t, r, "re")
		mustNil(t, l.LockContext(bg(t))) // warm the script cache, and learn the native commands
		mustNil(t, l.UnlockContext(bg(t)))
		cp.Commands()
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
		cycle := cp.Commands() // SET, and the release: EVALSHA, or DELEX (DELIFEQ), PUBLISH and EXISTS
		if want := releaseCommands(t, b); !slices.Equal(cycle, append([]string{"SET"}, want...)) {
			t.Fatalf("an uncontended cycle sent %v, want SET, then %v", cycle, want)
		}

		l.Lock()
		l.Lock()
		if !l.TryLock() {
			t.Fatal("reentrant TryLock failed")
		}
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
		l.Unlock()
		l.Unlock()
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 1 {
			t.Fatal("inner Unlock released the key")
		}
		l.Unlock()
		if got := cp.Commands(); !slices.Equal(got, cycle) {
			t.Fatalf("commands = %v, want %v: the obtain and the release", got, cycle)
		}
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("outermost Unlock left the key")
		}
	})
}

// Spring: two keys are independent.
func TestTwoKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		a, c := obtain(t, r, "a"), obtain(t, r, "c")
		a.Lock()
		if !inGoroutine(c.TryLock) {
			t.Fatal("lock on another key blocked")
		}
		a.Unlock()
	})
}

// Spring: a second goroutine's TryLock fails while held, then succeeds.
func TestTryLockOtherGoroutine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "k")
		l.Lock()
		if inGoroutine(l.TryLock) {
			t.Fatal("second goroutine's TryLock succeeded while held")
		}
		l.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if !l.TryLock() {
				t.Error("TryLock failed on a free lock")
				return
			}
			l.Unlock()
		}()
		<-done
	})
}

// Spring: a waiter in another registry blocks until the release.
func TestWaiterInOtherRegistry(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(10*time.Millisecond))
		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(10*time.Millisecond))
		l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
		l1.Lock()
		got := make(chan error, 1)
		go func() {
			err := l2.LockContext(bg(t))
			got <- err
			if err == nil {
				l2.Unlock()
			}
		}()
		notWithin(t, got, 200*time.Millisecond, "second registry acquiring a held lock")
		l1.Unlock()
		mustNil(t, recvWithin(t, got, 5*time.Second, "waiter to acquire after release"))
	})
}

// Spring: the wrong goroutine unlocking gets ErrNotOwner, or a panic whose
// value is an error that matches ErrNotOwner and names the key; the holder
// keeps the lock.
func TestWrongGoroutineUnlock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "k")
		l.Lock()
		defer l.Unlock()
		mustIs(t, inGoroutine(func() error { return l.UnlockContext(bg(t)) }), registry.ErrNotOwner)
		perr := inGoroutine(func() (err error) {
			defer func() { err, _ = recover().(error) }()
			l.Unlock()
			return nil
		})
		mustIs(t, perr, registry.ErrNotOwner)
		if !strings.Contains(perr.Error(), l.Key()) {
			t.Fatalf("panic %q does not name the key %q", perr, l.Key())
		}
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 1 {
			t.Fatal("a non-owner's Unlock released the key")
		}
	})
}

// Spring: expiry lets another registry in; the first holder's release
// reports ErrLockLost and leaves the second holder's key alone; Unlock()
// logs the loss at error level.
func TestExpiryLetsOtherInAndReportsLoss(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 300 * time.Millisecond
		pfx := prefix(t)
		rec := &logRecorder{}
		r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithExpireAfter(ttl), registry.WithLogger(slogFor(rec)))
		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithExpireAfter(10*time.Second))
		l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
		l1.Lock()
		b.expire(t, l1.Key(), ttl)
		h2, ok := holdIn(t, l2)
		if !ok {
			t.Fatal("second registry could not take the expired lock")
		}
		theirs, _ := redis.String(b.do(t, "GET", l2.Key()), nil)
		mustIs(t, l1.UnlockContext(bg(t)), registry.ErrLockLost)
		if now, _ := redis.String(b.do(t, "GET", l2.Key()), nil); now != theirs {
			t.Fatalf("first holder's release changed the key: %q -> %q", theirs, now)
		}
		mustNil(t, h2.unlock())
		// Once more through Unlock(): logged, not returned.
		l1.Lock()
		b.do(t, "DEL", l1.Key()) // gone behind the holder's back
		l1.Unlock()
		if rec.count(slog.LevelError, "lost") != 1 {
			t.Fatal("Unlock() did not log the lost lock at error level")
		}
	})
}

// Spring: a failed TryLock does not extend the holder's TTL.
func TestFailedTryLockKeepsTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithExpireAfter(5*time.Second))
		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithExpireAfter(50*time.Second))
		l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
		l1.Lock()
		defer l1.Unlock()
		before, _ := redis.Int64(b.do(t, "PTTL", l1.Key()), nil)
		if l2.TryLock() {
			t.Fatal("TryLock of a held lock succeeded")
		}
		after, _ := redis.Int64(b.do(t, "PTTL", l1.Key()), nil)
		if after > before || after <= 0 {
			t.Fatalf("PTTL went from %d to %d after a failed TryLock", before, after)
		}
	})
}

// Release runs even when the caller's ctx is already cancelled.
func TestUnlockWithCancelledContextReleases(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		mustNil(t, l.UnlockContext(ctx))
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("key not deleted by UnlockContext with a cancelled ctx")
		}
		if !inGoroutine(l.TryLock) {
			t.Fatal("local mutex still held after UnlockContext")
		}
	})
}

// One deadline covers the local queue and the Redis wait together.
func TestLockContextOneDeadline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		holder.Lock()
		defer holder.Unlock()
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newRegPrefix(t, cp, pfx, registry.WithIdleBetweenTries(10*time.Millisecond))
		l := obtain(t, r, "k")
		// g1 waits in Redis for 200ms; g2 queues behind it locally, then
		// waits in Redis; g2's 400ms deadline must cover both waits.
		g1 := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			g1 <- l.LockContext(ctx)
		}()
		// Only the goroutine at the head of the local queue talks to Redis:
		// g1's first attempt shows it holds the local mutex.
		waitFor(t, 5*time.Second, "g1 to try Redis", func() bool { return len(cp.Commands()) > 0 })
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		defer cancel()
		err := l.LockContext(ctx)
		elapsed := time.Since(start)
		mustIs(t, err, context.DeadlineExceeded)
		mustIs(t, <-g1, context.DeadlineExceeded)
		if elapsed > 400*time.Millisecond+2*time.Second {
			t.Fatalf("LockContext returned %v after a 400ms deadline", elapsed)
		}
		mustIs(t, l.UnlockContext(bg(t)), registry.ErrNotOwner) // nothing held
	})
}

// A key of the wrong type is a clear error after one attempt, not a wait.
func TestWrongTypeKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newReg(t, cp)
		l := obtain(t, r, "h")
		b.do(t, "RPUSH", l.Key(), "v")
		err := l.LockContext(bg(t))
		var re redis.Error
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "WRONGTYPE") ||
			!errors.Is(err, registry.ErrWrongKind) || !strings.Contains(err.Error(), "is a Redis list, not a lock") {
			t.Fatalf("LockContext on a list = %v, want ErrWrongKind naming the list, and a WRONGTYPE redis.Error", err)
		}
		// One attempt: the SET finds the key taken, then one script:
		// EVALSHA, maybe EVAL on a cold cache (and before the registry's
		// first attempt its INFO, and its label: one more script).
		if got := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "INFO" }); len(got) > 5 {
			t.Fatalf("commands for one attempt: %v", got)
		}
		if l.TryLock() {
			t.Fatal("TryLock succeeded on a hash key")
		}
		mustIs(t, l.UnlockContext(bg(t)), registry.ErrNotOwner)
	})
}

// Many goroutines of one registry on one key: mutual exclusion, FIFO local
// queueing, and no lock left behind.
func TestSameProcessContention(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "hot")
		var (
			wg      sync.WaitGroup
			inside  int
			counter int
		)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					l.Lock()
					inside++
					if inside != 1 {
						t.Error("two goroutines inside the lock")
					}
					counter++
					inside--
					l.Unlock()
				}
			}()
		}
		wg.Wait()
		if counter != 16*20 {
			t.Fatalf("counter = %d, want %d", counter, 16*20)
		}
	})
}

func slogFor(h *logRecorder) *slog.Logger { return slog.New(h) }
