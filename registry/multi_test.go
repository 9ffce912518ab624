package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// A multi-key lease holds every key as the mutex does: a RedisLock, a lease
// and a Spring client of any of them are kept out, and after its release
// every key is free and nothing is left in Redis.
func TestAcquireAllExcludesTheMutex(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx, ctx := prefix(t), bg(t)
				r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				le, err := r1.AcquireAll(ctx, []string{"c", "a", "b"}, 0)
				mustNil(t, err)
				keys := le.Keys()
				if len(keys) != 3 || keys[0] != pfx+":c" || le.Key() != keys[0] {
					t.Fatalf("Keys() = %q, Key() = %q", keys, le.Key())
				}
				if err := obtain(t, r2, "a").TryLockContext(ctx); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryLock of a held key: %v", err)
				}
				if _, err := r2.TryAcquire(ctx, "b", 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquire of a held key: %v", err)
				}
				if v := b.do(t, "SET", pfx+":c", "spring", "NX", "PX", 1000); v != nil {
					t.Fatalf("a Spring client's SET NX took a held key: %v", v)
				}
				if _, err := r2.TryAcquireAll(ctx, []string{"x", "b"}, 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquireAll over a held key: %v", err)
				}
				if n := b.do(t, "EXISTS", pfx+":x"); n != int64(0) {
					t.Fatal("TryAcquireAll took a key of a set it did not get")
				}
				// A waiting RedisLock gets its key at the release.
				got := lockInBackground(t, obtain(t, r2, "b"))
				notWithin(t, got, 100*time.Millisecond, "a lock of a held key")
				mustNil(t, le.Release(ctx))
				if err := recvWithin(t, got, 5*time.Second, "the lock, after the release"); err != nil {
					t.Fatal(err)
				}
				for _, k := range []string{"a", "c"} {
					if n := b.do(t, "EXISTS", pfx+":"+k); n != int64(0) {
						t.Fatalf("%s is left after the release", k)
					}
				}
				if err := le.Release(ctx); !errors.Is(err, registry.ErrNotOwner) {
					t.Fatalf("a second Release: %v", err)
				}
			})
		})
	}
}

// And the other way round: a RedisLock, and a Spring client's key (a value
// of no lockyard registry, set with SET NX PX), keep a multi-key caller
// out of a set that includes their key, and it takes none of the set; it
// gets the set once the lock is unlocked, or once the Spring key expires.
func TestAcquireAllKeptOutByTheMutex(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		r1, r2 := newRegPrefix(t, b.pool(t), pfx), newRegPrefix(t, b.pool(t), pfx)
		l := obtain(t, r2, "b")
		mustNil(t, l.LockContext(ctx))
		if v := b.do(t, "SET", pfx+":d", "spring-client-uuid", "NX", "PX", 5000); v == nil {
			t.Fatal("the Spring client's SET NX failed")
		}
		for _, set := range [][]string{{"a", "b"}, {"d", "a"}} {
			if _, err := r1.TryAcquireAll(ctx, set, 0); !errors.Is(err, registry.ErrNotObtained) {
				t.Fatalf("TryAcquireAll of %v: %v, want ErrNotObtained", set, err)
			}
			if n := b.do(t, "EXISTS", pfx+":a"); n != int64(0) {
				t.Fatalf("TryAcquireAll of %v took a", set)
			}
		}
		got := make(chan *registry.Lease, 1)
		acquireAll := func(keys ...string) { // in the background, into got
			go func() {
				le, err := r1.AcquireAll(ctx, keys, 0)
				if err != nil {
					t.Error(err)
				}
				got <- le
			}()
		}
		acquireAll("a", "b")
		notWithin(t, got, 150*time.Millisecond, "AcquireAll beside a locked RedisLock")
		mustNil(t, l.UnlockContext(ctx))
		if le := recvWithin(t, got, 5*time.Second, "AcquireAll, once the RedisLock was unlocked"); le == nil {
			t.FailNow() // its error is reported
		} else {
			mustNil(t, le.Release(ctx))
		}
		b.do(t, "SET", pfx+":d", "spring-client-uuid", "PX", 400) // its last 400 ms
		acquireAll("a", "d")
		notWithin(t, got, 100*time.Millisecond, "AcquireAll beside a Spring client's key")
		if b.mr != nil { // the real server's clock runs on its own
			b.mr.FastForward(400 * time.Millisecond)
		}
		le := recvWithin(t, got, 5*time.Second, "AcquireAll, once the Spring key expired")
		if le == nil {
			t.FailNow() // its error is reported
		}
		if v, _ := redis.String(b.do(t, "GET", pfx+":d"), nil); v == "spring-client-uuid" || v == "" {
			t.Fatalf("d holds %q, want the multi-key lease's token", v)
		}
		mustNil(t, le.Release(ctx))
	})
}

// All or nothing: while one key is held, a waiting AcquireAll takes none
// of the others, and gets them all once it is free.
func TestAcquireAllAllOrNothing(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		r1, r2 := newRegPrefix(t, b.pool(t), pfx), newRegPrefix(t, b.pool(t), pfx)
		held, err := r2.Acquire(ctx, "b", 0)
		mustNil(t, err)
		got := make(chan *registry.Lease, 1)
		go func() {
			le, err := r1.AcquireAll(ctx, []string{"a", "b", "c"}, 0)
			if err != nil {
				t.Error(err)
			}
			got <- le
		}()
		notWithin(t, got, 150*time.Millisecond, "AcquireAll beside a held key")
		for _, k := range []string{"a", "c"} {
			if n := b.do(t, "EXISTS", pfx+":"+k); n != int64(0) {
				t.Fatalf("a waiting AcquireAll holds %s", k)
			}
			// The free keys stay free for others meanwhile.
			other, err := r2.TryAcquire(ctx, k, 0)
			mustNil(t, err)
			mustNil(t, other.Release(ctx))
		}
		mustNil(t, held.Release(ctx))
		le := recvWithin(t, got, 5*time.Second, "AcquireAll, once the key was free")
		for _, k := range []string{"a", "b", "c"} {
			if v, _ := redis.String(b.do(t, "GET", pfx+":"+k), nil); v == "" {
				t.Fatalf("%s is not held", k)
			}
		}
		mustNil(t, le.Release(ctx))
	})
}

// Bad input is refused before anything is sent, with clear errors; a key
// of another kind in Redis is ErrWrongKind naming the key, and nothing is
// taken.
func TestAcquireAllBadInput(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		r := newRegPrefix(t, b.pool(t), pfx)
		many := make([]string, registry.MaxKeys+1)
		for i := range many {
			many[i] = fmt.Sprint("k", i)
		}
		semaphore(t, r, "sem", 2)
		for name, keys := range map[string][]string{
			"no keys": nil, "a duplicate": {"a", "b", "a"}, "too many": many, "an empty key": {"a", ""},
			"a key cached as a semaphore": {"a", "sem"},
		} {
			if _, err := r.AcquireAll(ctx, keys, 0); !errors.Is(err, registry.ErrInvalidKey) {
				t.Errorf("%s: %v, want ErrInvalidKey", name, err)
			}
			if _, err := r.TryAcquireAll(ctx, keys, 0); !errors.Is(err, registry.ErrInvalidKey) {
				t.Errorf("TryAcquireAll, %s: %v, want ErrInvalidKey", name, err)
			}
		}
		if _, err := r.AcquireAll(ctx, []string{"a"}, time.Microsecond); !errors.Is(err, registry.ErrInvalidConfig) {
			t.Errorf("a TTL below MinExpireAfter: %v", err)
		}
		b.do(t, "RPUSH", pfx+":list", "x")
		for _, try := range []bool{false, true} {
			acquire := r.AcquireAll
			if try {
				acquire = r.TryAcquireAll
			}
			_, err := acquire(ctx, []string{"a", "list", "c"}, 0)
			if !errors.Is(err, registry.ErrWrongKind) || !strings.Contains(err.Error(), pfx+":list") {
				t.Fatalf("a list among the keys (try %v): %v, want ErrWrongKind naming it", try, err)
			}
		}
		if n := b.do(t, "EXISTS", pfx+":a", pfx+":c"); n != int64(0) {
			t.Fatal("a refused AcquireAll took keys")
		}
		if keys, _ := redis.Strings(b.do(t, "KEYS", pfx+"*"), nil); len(keys) != 1 {
			t.Fatalf("left in Redis: %q", keys)
		}
	})
}

// Release frees every key it still holds when one was lost, and names the
// lost one; Lost closes when a renewal finds a key gone.
func TestAcquireAllLostKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		r := newRegPrefix(t, b.pool(t), pfx)
		le, err := r.AcquireAll(ctx, []string{"a", "b", "c"}, 0)
		mustNil(t, err)
		b.do(t, "DEL", pfx+":b")
		err = le.Release(ctx)
		if !errors.Is(err, registry.ErrLockLost) || !strings.Contains(err.Error(), pfx+":b") || strings.Contains(err.Error(), pfx+":a\"") {
			t.Fatalf("Release after a key was lost: %v, want ErrLockLost naming it alone", err)
		}
		if n := b.do(t, "EXISTS", pfx+":a", pfx+":c"); n != int64(0) {
			t.Fatal("the keys still held were not released")
		}

		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithAutoRenew(), registry.WithExpireAfter(300*time.Millisecond))
		le, err = r2.AcquireAll(ctx, []string{"a", "b"}, 0)
		mustNil(t, err)
		lost := le.Lost()
		if b.mr != nil {
			// miniredis's clock: renewals are what keep the keys.
			waitFor(t, 5*time.Second, "a renewal", func() bool { return r2.Stats().Renewals > 0 })
		} else {
			time.Sleep(450 * time.Millisecond) // past the TTL: renewed
		}
		for _, k := range []string{"a", "b"} {
			if n := b.do(t, "EXISTS", pfx+":"+k); n != int64(1) {
				t.Fatalf("%s expired under WithAutoRenew", k)
			}
		}
		mustNil(t, le.Renew(ctx, 0))
		b.do(t, "DEL", pfx+":a")
		recvWithin(t, lost, 5*time.Second, "Lost, after a key was deleted")
		if err := le.Renew(ctx, 0); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Renew of a lost lease: %v", err)
		}
		if err := le.Release(ctx); !errors.Is(err, registry.ErrLockLost) || !strings.Contains(err.Error(), pfx+":a") {
			t.Fatalf("Release of a lost lease: %v", err)
		}
		if n := b.do(t, "EXISTS", pfx+":b"); n != int64(0) {
			t.Fatal("the key still held was not released")
		}
	})
}

// With WithFencing each key's token is larger than every earlier hold's of
// that key, a RedisLock's included, and a RedisLock after it gets a
// larger one.
func TestAcquireAllFencing(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithFencing())
		first, err := r.Acquire(ctx, "b", 0)
		mustNil(t, err)
		tb := first.Token()
		mustNil(t, first.Release(ctx))
		le, err := r.AcquireAll(ctx, []string{"a", "b"}, 0)
		mustNil(t, err)
		tokens := le.Tokens()
		if len(tokens) != 2 || tokens[0] <= 0 || tokens[1] <= tb || le.Token() != tokens[0] {
			t.Fatalf("Tokens() = %v after b's %d; Token() = %d", tokens, tb, le.Token())
		}
		mustNil(t, le.Release(ctx))
		if got := le.Tokens(); got[0] != 0 || got[1] != 0 {
			t.Fatalf("Tokens() after Release = %v", got)
		}
		after, err := r.Acquire(ctx, "a", 0)
		mustNil(t, err)
		if after.Token() <= tokens[0] {
			t.Fatalf("a lease after the multi-key one got %d, not above %d", after.Token(), tokens[0])
		}
		mustNil(t, after.Release(ctx))
	})
}

// Callers that name the same keys in opposite orders never deadlock and
// never overlap, and every call returns.
func TestAcquireAllNoDeadlock(t *testing.T) {
	b := realBackend()
	pfx, ctx := prefix(t), bg(t)
	sets := [][]string{{"a", "b", "c"}, {"c", "b", "a"}, {"b", "d"}, {"d", "a"}}
	inside := map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}, "d": {}}
	var overlaps, done atomic.Int32
	var wg sync.WaitGroup
	for i, keys := range sets {
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType([]registry.LockType{registry.SpinLock, registry.PubSubLock}[i%2]))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				c, cancel := context.WithTimeout(ctx, 10*time.Second)
				le, err := r.AcquireAll(c, keys, 0)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				for _, k := range keys {
					if inside[k].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // the critical section
				for _, k := range keys {
					inside[k].Add(-1)
				}
				mustNil(t, le.Release(ctx))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || done.Load() != 160 {
		t.Fatalf("%d overlaps, %d of 160 acquisitions", overlaps.Load(), done.Load())
	}
}

// A multi-key waiter is not starved by single-key lockers that keep each
// of its keys busy in turn: it takes its turn in each key's line, and
// gathers them.
func TestAcquireAllNotStarved(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			b := realBackend()
			pfx := prefix(t)
			ctx, cancel := context.WithTimeout(bg(t), 3*time.Second)
			defer cancel()
			keys := []string{"a", "b", "c", "d"}
			var wg sync.WaitGroup
			for _, k := range keys {
				r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						le, err := r.Acquire(ctx, k, 0)
						if err != nil {
							return
						}
						time.Sleep(time.Millisecond)
						_ = le.Release(bg(t))
					}
				}()
			}
			m := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
			var got int
			var longest time.Duration
			for ctx.Err() == nil && got < 10 {
				start := time.Now()
				le, err := m.AcquireAll(ctx, keys, 0)
				if err != nil {
					t.Logf("AcquireAll: %v", err)
					break
				}
				longest = max(longest, time.Since(start))
				got++
				mustNil(t, le.Release(bg(t)))
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			t.Logf("%d multi-key acquisitions, the longest wait %v", got, longest)
			if got < 10 || longest > 500*time.Millisecond {
				t.Fatalf("%d multi-key acquisitions in 3 s beside single-key lockers, the longest wait %v; want 10, within 500ms", got, longest)
			}
		})
	}
}

// Arbitrary keys: AcquireAll refuses what it must (an empty or too long
// key, a key given twice) with ErrInvalidKey and takes the rest, each at
// its own lock key; a RedisLock of any of them is kept out.
func FuzzAcquireAllKeys(f *testing.F) {
	mr, pool := fuzzKeyPairs(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		r, err := registry.New(pool, "fuzzmulti")
		mustNil(t, err)
		defer r.Close()
		le, err := r.TryAcquireAll(context.Background(), []string{a, b}, 0)
		bad := func(k string) bool { return k == "" || len(k) > registry.MaxKeyLen }
		if bad(a) || bad(b) || a == b {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		mustNil(t, err)
		defer func() { mustNil(t, le.Release(context.Background())) }()
		if keys := le.Keys(); len(keys) != 2 || keys[0] != "fuzzmulti:"+a || keys[1] != "fuzzmulti:"+b || !mr.Exists(keys[0]) || !mr.Exists(keys[1]) {
			t.Fatalf("keys %q in Redis: %v %v", le.Keys(), mr.Exists("fuzzmulti:"+a), mr.Exists("fuzzmulti:"+b))
		}
		r2, err := registry.New(pool, "fuzzmulti")
		mustNil(t, err)
		defer r2.Close()
		if err := obtain(t, r2, b).TryLockContext(context.Background()); !errors.Is(err, registry.ErrNotObtained) {
			t.Fatalf("TryLock of %q beside a multi-key lease: %v", b, err)
		}
	})
}

// lostReply runs the first call of the script named name, then loses its
// reply after delay, as a connection that timed out would.
type lostReply struct {
	registry.Client
	name  string
	delay time.Duration
	done  atomic.Bool
}

func (c *lostReply) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == c.name && c.done.CompareAndSwap(false, true) {
		time.Sleep(c.delay)
		return nil, errors.New("i/o timeout (injected)")
	}
	return v, err
}

// After a lost reply the retry, with the same token, finds the keys its
// own: their TTL starts again at the retry, from which the lease counts
// its validity, so no other holder gets them while it is valid.
func TestAcquireAllLostReply(t *testing.T) {
	// The retry within the waiter's patience is multitake.lua's, after it
	// multiacquire.lua's.
	for _, delay := range []time.Duration{80 * time.Millisecond, 600 * time.Millisecond} {
		b := realBackend()
		pfx, ctx := prefix(t), bg(t)
		c := &lostReply{Client: registry.NewPoolClient(b.pool(t)), name: "multitake", delay: delay}
		r := newRegClientPrefix(t, c, pfx)
		ttl := delay/2 + 250*time.Millisecond
		le, err := r.AcquireAll(ctx, []string{"a", "b"}, ttl)
		mustNil(t, err)
		if pttl, _ := redis.Int64(b.do(t, "PTTL", pfx+":a"), nil); time.Duration(pttl)*time.Millisecond < ttl-30*time.Millisecond {
			t.Fatalf("reply lost for %v: PTTL of a key taken again after it %d ms, want the whole TTL (%v)", delay, pttl, ttl)
		}
		mustNil(t, le.Release(ctx))
	}
}

// Single-key lockers that hold each key longer than a multi-key waiter
// first gathers, staggered so that one key is always held, do not starve
// it: it gathers for longer each time, from when the key that kept it out
// longest frees.
func TestAcquireAllNotStarvedByLongHolds(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			b := realBackend()
			pfx := prefix(t)
			ctx, cancel := context.WithCancel(bg(t))
			defer cancel()
			const hold = 60 * time.Millisecond
			keys := []string{"a", "b"}
			var wg sync.WaitGroup
			for i, k := range keys {
				r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i > 0 {
						_ = sleepCtx(ctx, hold/2) // staggered: one key is always held
					}
					for ctx.Err() == nil {
						le, err := r.Acquire(ctx, k, 0)
						if err != nil {
							return
						}
						_ = sleepCtx(ctx, hold)
						_ = le.Release(bg(t))
					}
				}()
			}
			waitFor(t, 5*time.Second, "both keys held", func() bool { return b.do(t, "EXISTS", pfx+":a", pfx+":b") == int64(2) })
			m := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
			got := 0
			start := time.Now()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			for got < 3 {
				le, err := m.AcquireAll(wctx, keys, 0)
				if err != nil {
					break
				}
				got++
				mustNil(t, le.Release(bg(t)))
			}
			cancel()
			wg.Wait()
			t.Logf("%d multi-key acquisitions in %v", got, time.Since(start))
			if got < 3 {
				t.Fatalf("%d of 3 multi-key acquisitions in 5 s beside lockers holding each key %v in turn", got, hold)
			}
		})
	}
}

// sleepCtx sleeps d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// A multi-key waiter that waits for a key held for long lets the turns of
// its other keys go: a locker of one of them is not kept waiting for it.
func TestAcquireAllIdlesNoFreeKey(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			b := realBackend()
			pfx := prefix(t)
			ctx, cancel := context.WithTimeout(bg(t), 10*time.Second)
			defer cancel()
			r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
			held, err := r.Acquire(ctx, "b", 0)
			mustNil(t, err)
			defer func() { mustNil(t, held.Release(bg(t))) }()
			m := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
			mctx, mcancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				if le, err := m.AcquireAll(mctx, []string{"a", "b"}, 0); err == nil {
					_ = le.Release(bg(t))
				}
			}()
			// In a's line (past its patience): its first gathering ends
			// 20 ms later, well within the bound below.
			waitFor(t, 5*time.Second, "the multi-key waiter in a's line", func() bool { return queueLen(t, b, pfx+":a", false) == 1 })
			l := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
			var worst time.Duration
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				start := time.Now()
				le, err := l.Acquire(ctx, "a", 0)
				mustNil(t, err)
				worst = max(worst, time.Since(start))
				time.Sleep(time.Millisecond)
				mustNil(t, le.Release(bg(t)))
			}
			mcancel()
			<-done
			t.Logf("the worst wait for the free key a beside a multi-key waiter: %v", worst)
			if worst > 100*time.Millisecond {
				t.Fatalf("a locker of a free key waited %v beside a multi-key waiter that waits for another key", worst)
			}
		})
	}
}

// ReleaseAfter with one key lost leaves the others to expire, tells their
// waiters when they have, and names the lost key.
func TestAcquireAllReleaseAfterLostKey(t *testing.T) {
	b := realBackend()
	pfx, ctx := prefix(t), bg(t)
	r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5*time.Second))
	le, err := r.AcquireAll(ctx, []string{"a", "b", "c", "d"}, 0)
	mustNil(t, err)
	w := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5*time.Second))
	got := make(chan time.Time, 1)
	go func() {
		if l, err := w.Acquire(ctx, "a", 0); err == nil {
			got <- time.Now()
			_ = l.Release(bg(t))
		}
	}()
	waitFor(t, 5*time.Second, "the waiter in a's line", func() bool { return queueLen(t, b, pfx+":a", false) == 1 })
	b.do(t, "DEL", pfx+":d")
	start := time.Now()
	err = le.ReleaseAfter(ctx, 100*time.Millisecond)
	if !errors.Is(err, registry.ErrLockLost) || !strings.Contains(err.Error(), pfx+":d") {
		t.Fatalf("ReleaseAfter with d lost: %v, want ErrLockLost naming d", err)
	}
	at := recvWithin(t, got, 3*time.Second, "the waiter of a, told when a expired")
	if d := at.Sub(start); d > time.Second {
		t.Fatalf("the waiter of a got it %v after the ReleaseAfter of 100ms", d)
	}
}

// Inspect of any key of a multi-key lease shows its holder, with the
// holder registry's label, and a multi-key waiter in the key's line.
func TestAcquireAllInspect(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, ctx := prefix(t), bg(t)
		holder := newRegPrefix(t, b.pool(t), pfx, registry.WithLabel("holder"), registry.WithLockType(registry.PubSubLock))
		waiter := newRegPrefix(t, b.pool(t), pfx, registry.WithLabel("waiter"), registry.WithLockType(registry.PubSubLock))
		le, err := holder.AcquireAll(ctx, []string{"a", "b"}, 0)
		mustNil(t, err)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if w, err := waiter.AcquireAll(wctx, []string{"b", "c"}, 0); err == nil {
				_ = w.Release(bg(t))
			}
		}()
		var info registry.KeyInfo
		waitFor(t, 5*time.Second, "the multi-key waiter in b's line", func() bool {
			if b.mr != nil {
				b.mr.FastForward(0)
			}
			info, err = holder.Inspect(ctx, "b")
			mustNil(t, err)
			return len(info.Waiters) == 1
		})
		if info.Kind != "lock" || len(info.Holders) != 1 || info.Holders[0].Label != "holder" || info.Holders[0].TTL <= 0 || info.Waiters[0].Label != "waiter" {
			t.Fatalf("Inspect(b): %+v, want the multi-key holder and waiter with their labels", info)
		}
		if a, err := holder.Inspect(ctx, "a"); err != nil || len(a.Holders) != 1 || a.Holders[0].Registry != info.Holders[0].Registry {
			t.Fatalf("Inspect(a): %+v %v, want the same holder", a, err)
		}
		cancel()
		<-done
		mustNil(t, le.Release(ctx))
	})
}

// A queued multi-key waiter that a line dropped (a turn it did not take in
// time, an entry that lapsed) comes back at the place it first took, not
// at the end of the line.
func TestAcquireAllKeepsItsPlace(t *testing.T) {
	b := realBackend()
	pfx, ctx := prefix(t), bg(t)
	r := newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(50*time.Millisecond))
	held, err := r.Acquire(ctx, "b", 0)
	mustNil(t, err)
	m := newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(50*time.Millisecond))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if le, err := m.AcquireAll(mctx, []string{"a", "b"}, 0); err == nil {
			_ = le.Release(bg(t))
		}
	}()
	queue := queueKey(pfx+":a", false)
	entry := func() (string, string) {
		v, _ := redis.Strings(b.do(t, "ZRANGE", queue, 0, 0, "WITHSCORES"), nil)
		if len(v) < 2 {
			return "", ""
		}
		return v[0], v[1]
	}
	var id, first string
	waitFor(t, 5*time.Second, "the multi-key waiter in a's line", func() bool { id, first = entry(); return id != "" })
	b.do(t, "ZREM", queue, id) // the line drops it
	waitFor(t, 5*time.Second, "the waiter back in a's line", func() bool {
		again, score := entry()
		if again == "" {
			return false
		}
		if again != id || score != first {
			t.Fatalf("back in line as %s at %s, first %s at %s: not at its place", again, score, id, first)
		}
		return true
	})
	cancel()
	<-done
	mustNil(t, held.Release(ctx))
}

// Across Cluster slots (one group per slot, forced here on one server),
// the groups taken are held while a later group is waited for longer than
// the TTL: renewed every third of it, not left to expire (the real server,
// whose clock expires keys). The lease then holds every key.
func TestAcquireAllSlotsHeldThroughLongWait(t *testing.T) {
	b := realBackend()
	pfx, ctx := prefix(t), bg(t)
	first, second := "{s1}", "{s2}"
	if wire.Slot(pfx+":"+first) > wire.Slot(pfx+":"+second) {
		first, second = second, first // taken in slot order
	} else if wire.Slot(pfx+":"+first) == wire.Slot(pfx+":"+second) {
		t.Fatal("the two keys share a slot")
	}
	h, err := newRegPrefix(t, b.pool(t), pfx).Acquire(ctx, second, 10*time.Second)
	mustNil(t, err)
	r := newRegPrefix(t, b.pool(t), pfx)
	r.SplitBySlot()
	const ttl = 600 * time.Millisecond
	got := make(chan *registry.Lease, 1)
	go func() {
		le, _ := r.AcquireAll(ctx, []string{first, second}, ttl)
		got <- le // nil on error
	}()
	waitFor(t, 5*time.Second, "the first slot's key taken", func() bool { return b.do(t, "EXISTS", pfx+":"+first) == int64(1) })
	token := b.do(t, "GET", pfx+":"+first)
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if v := b.do(t, "GET", pfx+":"+first); fmt.Sprint(v) != fmt.Sprint(token) {
			t.Fatalf("the first slot's key went from %s to %v while the second was waited for", token, v)
		}
	}
	mustNil(t, h.Release(ctx))
	le := recvWithin(t, got, 5*time.Second, "the lease, once the second key freed")
	if le == nil {
		t.Fatal("AcquireAll failed")
	}
	if v := b.do(t, "GET", pfx+":"+first); fmt.Sprint(v) != fmt.Sprint(token) {
		t.Fatalf("the lease holds the first key with %v, not the token it waited with (%s)", v, token)
	}
	mustNil(t, le.Release(ctx))
}

// An uncontended cycle on free keys asks once whether any of them, their
// turns or their lines exist (one EXISTS, no MGET), sets each key, and
// releases with one MGET and one EXISTS of the lines: INFO commandstats,
// so the real server only. With fencing the same, and each key's token
// still comes back.
func TestAcquireAllUncontendedCommands(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	keys := []string{"a", "b", "c", "d", "e"}
	for _, fencing := range []bool{false, true} {
		var opts []registry.Option
		if fencing {
			opts = append(opts, registry.WithFencing())
		}
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		le, err := r.AcquireAll(ctx, keys, 0) // the first cycle loads the scripts, and seeds the fence counters
		mustNil(t, err)
		mustNil(t, le.Release(ctx))
		before, err := redistest.CommandStats(b.addr)
		mustNil(t, err)
		le, err = r.AcquireAll(ctx, keys, 0)
		mustNil(t, err)
		if fencing && slices.Contains(le.Tokens(), 0) {
			t.Fatalf("Tokens() = %v with fencing", le.Tokens())
		}
		mustNil(t, le.Release(ctx))
		after, err := redistest.CommandStats(b.addr)
		mustNil(t, err)
		want := map[string]int{"evalsha": 2, "exists": 2, "mget": 1, "set": 5, "del": 1, "publish": 5, "get": 0, "pexpire": 0}
		if fencing {
			want["get"], want["incr"] = 5, 5 // each counter read, then incremented
		}
		for cmd, n := range want {
			if got := after[cmd] - before[cmd]; got != n {
				t.Errorf("fencing %v: %d %s calls in an uncontended cycle of 5 keys, want %d", fencing, got, cmd, n)
			}
		}
		if n := b.do(t, "EXISTS", pfx+":a", pfx+":e"); n != int64(0) {
			t.Fatalf("fencing %v: keys left after Release", fencing)
		}
	}
}
