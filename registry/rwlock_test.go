package registry_test

import (
	"context"
	"errors"
	"fmt"
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

// rwlock returns the read-write lock of r on key.
func rwlock(t *testing.T, r *registry.Registry, key string) *registry.RWLock {
	t.Helper()
	l, err := r.RWLock(key)
	if err != nil {
		t.Fatalf("RWLock(%q): %v", key, err)
	}
	return l
}

// acquireRW acquires l's write side (write) or read side in a new
// goroutine and returns the lease on a channel (nil on error).
func acquireRW(ctx context.Context, l *registry.RWLock, write bool) <-chan *registry.Lease {
	return acquireRWFor(ctx, l, write, 0)
}

// acquireRWFor is acquireRW with a TTL.
func acquireRWFor(ctx context.Context, l *registry.RWLock, write bool, ttl time.Duration) <-chan *registry.Lease {
	got := make(chan *registry.Lease, 1)
	go func() {
		acquire := l.AcquireRead
		if write {
			acquire = l.AcquireWrite
		}
		le, err := acquire(ctx, ttl)
		if err != nil {
			le = nil
		}
		got <- le
	}()
	return got
}

// Readers of two registries hold the key together, a writer waits for
// them and excludes both sides, and nothing is left in Redis after.
func TestRWLockSides(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				ctx := bg(t)
				r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				a, c := rwlock(t, r1, "k"), rwlock(t, r2, "k")
				ra, err := a.AcquireRead(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				rc, err := c.TryAcquireRead(ctx, 0)
				if err != nil {
					t.Fatalf("a second registry's reader: %v", err)
				}
				if _, err := c.TryAcquireWrite(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquireWrite beside readers: %v", err)
				}
				w := acquireRW(ctx, c, true)
				notWithin(t, w, 150*time.Millisecond, "a writer beside readers")
				_ = rc // c's read lease blocks c's own writer too, in its local queue
				if err := ra.Release(ctx); err != nil {
					t.Fatal(err)
				}
				notWithin(t, w, 150*time.Millisecond, "a writer beside its own registry's reader")
				if err := rc.Release(ctx); err != nil {
					t.Fatal(err)
				}
				wl := leaseWithin(t, w, 5*time.Second, "the writer, once the readers left")
				if _, err := a.TryAcquireRead(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquireRead beside a writer: %v", err)
				}
				rd := acquireRW(ctx, a, false)
				notWithin(t, rd, 100*time.Millisecond, "a reader beside a writer")
				if err := wl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				rl := leaseWithin(t, rd, 5*time.Second, "the reader, once the writer left")
				if err := rl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				lk := a.Key()
				for _, k := range []string{lk, lk + ":readers", queueKey(lk, false)} {
					_ = k
				}
				if n := b.do(t, "EXISTS", lk); n != int64(0) {
					t.Fatalf("the key is left after the last release: %v", n)
				}
			})
		})
	}
}

// A waiting writer stops new readers, also those of the registries that
// read: the readers that hold finish, the writer enters, and the readers
// that came after it enter after it.
func TestRWLockWriterNotStarved(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				ctx := bg(t)
				var readers []*registry.RWLock
				for range 3 {
					readers = append(readers, rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt)), "k"))
				}
				writer := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt)), "k")
				var inside, overlaps atomic.Int32
				var wrote atomic.Bool
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for _, l := range readers {
					for range 3 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								select {
								case <-stop:
									return
								default:
								}
								le, err := l.AcquireRead(ctx, 0)
								if err != nil {
									t.Error(err)
									return
								}
								if inside.Load() < 0 {
									overlaps.Add(1)
								}
								time.Sleep(3 * time.Millisecond) // a read section
								if err := le.Release(ctx); err != nil {
									t.Error(err)
									return
								}
							}
						}()
					}
				}
				start := time.Now()
				var longest time.Duration
				for range 5 {
					t0 := time.Now()
					le, err := writer.AcquireWrite(ctx, 0)
					if err != nil {
						t.Fatal(err)
					}
					longest = max(longest, time.Since(t0))
					inside.Store(-1)
					time.Sleep(2 * time.Millisecond)
					inside.Store(0)
					wrote.Store(true)
					if err := le.Release(ctx); err != nil {
						t.Fatal(err)
					}
					time.Sleep(20 * time.Millisecond)
				}
				close(stop)
				wg.Wait()
				if n := overlaps.Load(); n > 0 {
					t.Fatalf("%d readers entered beside the writer", n)
				}
				t.Logf("5 writes in %v beside 9 readers, longest wait %v", time.Since(start), longest)
				if longest > time.Second {
					t.Fatalf("the writer waited %v", longest)
				}
			})
		})
	}
}

// A read-write lock's key used as a lock or a semaphore, or the reverse,
// fails at once with ErrWrongKind naming both kinds.
func TestRWLockWrongKind(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pool := b.pool(t)
		pfx := prefix(t)
		r, r2 := newRegPrefix(t, pool, pfx), newRegPrefix(t, pool, pfx)
		ctx, cancel := context.WithTimeout(bg(t), 5*time.Second)
		defer cancel()
		wrong := func(what string, err error, is, not string) {
			t.Helper()
			if !errors.Is(err, registry.ErrWrongKind) || ctx.Err() != nil || !strings.Contains(err.Error(), "is a "+is+", not a "+not) {
				t.Fatalf("%s: %v, want ErrWrongKind at once, naming both kinds", what, err)
			}
		}
		le, err := rwlock(t, r, "rw").AcquireRead(ctx, 0)
		mustNil(t, err)
		defer func() { mustNil(t, le.Release(bg(t))) }()
		_, err = r2.Acquire(ctx, "rw", 0)
		wrong("a lock on a read-write lock's key", err, "rwlock", "lock")
		_, err = semaphore(t, newRegPrefix(t, pool, pfx), "rw", 2).Acquire(ctx, 0)
		wrong("a semaphore on a read-write lock's key", err, "rwlock", "semaphore")

		lock, err := r.Acquire(ctx, "l", 0)
		mustNil(t, err)
		defer func() { mustNil(t, lock.Release(bg(t))) }()
		permit, err := semaphore(t, r, "s", 2).Acquire(ctx, 0)
		mustNil(t, err)
		defer func() { mustNil(t, permit.Release(bg(t))) }()
		for key, kind := range map[string]string{"l": "lock", "s": "semaphore"} {
			l := rwlock(t, r2, key)
			_, err = l.AcquireWrite(ctx, 0)
			wrong("AcquireWrite on a "+kind+"'s key", err, kind, "rwlock")
			_, err = l.TryAcquireRead(ctx, 0)
			wrong("TryAcquireRead on a "+kind+"'s key", err, kind, "rwlock")
		}
		if _, err := r.RWLock("l"); !errors.Is(err, registry.ErrInvalidKey) {
			t.Fatalf("RWLock of a key cached as a lock: %v", err)
		}
	})
}

// A reader that dies frees its share at its own TTL: a writer waiting
// behind a long reader that leaves and a short one that never does gets
// the key once the short one's TTL runs out.
func TestRWLockReadersExpireOneByOne(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		ctx := bg(t)
		long := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
		short := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
		w := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
		ll, err := long.AcquireRead(ctx, 20*time.Second)
		mustNil(t, err)
		start := time.Now()
		_, err = short.AcquireRead(ctx, 400*time.Millisecond) // never released
		mustNil(t, err)
		got := acquireRW(ctx, w, true)
		notWithin(t, got, 100*time.Millisecond, "a writer beside two readers")
		mustNil(t, ll.Release(ctx))
		le := leaseWithin(t, got, 3*time.Second, "the writer, after the short reader's TTL")
		if d := time.Since(start); d < 350*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("the writer got in %v after the short reader (TTL 400ms) took its share", d)
		}
		mustNil(t, le.Release(ctx))
	})
}

// The readers of one registry share one hold in Redis; with fencing each
// lease has its own, and every token is larger than every earlier one,
// reads and writes alike.
func TestRWLockSharedHoldAndFencing(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := bg(t)
		for _, fenced := range []bool{false, true} {
			var opts []registry.Option
			if fenced {
				opts = append(opts, registry.WithFencing())
			}
			l := rwlock(t, newRegPrefix(t, b.pool(t), prefix(t), opts...), "k")
			var leases []*registry.Lease
			var last int64
			for i := range 16 {
				le, err := l.AcquireRead(ctx, 0)
				mustNil(t, err)
				leases = append(leases, le)
				if fenced && le.Token() <= last {
					t.Fatalf("read %d: token %d after %d", i, le.Token(), last)
				}
				last = le.Token()
			}
			n := b.do(t, "ZCARD", wire.Layout{Registry: ""}.ReadersKey(l.Key()))
			want := int64(1)
			if fenced {
				want = 16
			}
			if n != want {
				t.Fatalf("fenced %v: %v readers in Redis for 16 leases of one registry, want %d", fenced, n, want)
			}
			for _, le := range leases {
				mustNil(t, le.Release(ctx))
			}
			w, err := l.AcquireWrite(ctx, 0)
			mustNil(t, err)
			if fenced && w.Token() <= last {
				t.Fatalf("write token %d after %d", w.Token(), last)
			}
			mustNil(t, w.Release(ctx))
		}
	})
}

// Downgrade turns a write lease into a read lease at once: the readers of
// this registry queued behind it join it, a writer does not get in
// between, and the lease keeps its token.
func TestRWLockDowngrade(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		ctx := bg(t)
		a := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
		c := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithFencing()), "k")
		w, err := a.AcquireWrite(ctx, 0)
		mustNil(t, err)
		token := w.Token()
		localReader := acquireRW(ctx, a, false)
		otherWriter := acquireRW(ctx, c, true)
		notWithin(t, localReader, 50*time.Millisecond, "a reader beside a writer")
		mustNil(t, w.Downgrade(ctx))
		if w.Token() != token {
			t.Fatalf("Downgrade changed the token: %d, was %d", w.Token(), token)
		}
		if err := w.Downgrade(ctx); !errors.Is(err, registry.ErrNotOwner) {
			t.Fatalf("a second Downgrade: %v", err)
		}
		r := leaseWithin(t, localReader, 3*time.Second, "the local reader, after Downgrade")
		notWithin(t, otherWriter, 100*time.Millisecond, "a writer beside the downgraded lease")
		mustNil(t, r.Release(ctx))
		mustNil(t, w.Release(ctx))
		ow := leaseWithin(t, otherWriter, 3*time.Second, "the writer, after the readers")
		mustNil(t, ow.Release(ctx))
		if err := r.Downgrade(ctx); !errors.Is(err, registry.ErrNotOwner) {
			t.Fatalf("Downgrade of a released read lease: %v", err)
		}
	})
}

// Inspect shows the writer, the readers and the waiters with their sides.
func TestRWLockInspect(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		ctx := bg(t)
		r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithLabel("one"))
		r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLabel("two"))
		w, err := rwlock(t, r1, "k").AcquireWrite(ctx, 0)
		mustNil(t, err)
		rd := acquireRW(ctx, rwlock(t, r2, "k"), false)
		var info registry.KeyInfo
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, err = r1.Inspect(ctx, "k")
			mustNil(t, err)
			if len(info.Waiters) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if info.Kind != "rwlock" || len(info.Holders) != 1 || info.Holders[0].Mode != "write" || info.Holders[0].Label != "one" ||
			len(info.Waiters) != 1 || info.Waiters[0].Mode != "read" || info.Waiters[0].Label != "two" {
			t.Fatalf("Inspect with a writer and a waiting reader: %+v", info)
		}
		mustNil(t, w.Release(ctx))
		r := recvWithin(t, rd, 3*time.Second, "the reader")
		info, err = r1.Inspect(ctx, "k")
		mustNil(t, err)
		if info.Kind != "rwlock" || len(info.Holders) != 1 || info.Holders[0].Mode != "read" || info.Holders[0].TTL <= 0 || len(info.Waiters) != 0 {
			t.Fatalf("Inspect with a reader: %+v", info)
		}
		mustNil(t, r.Release(ctx))

		// Only a waiter left (the key expired or was removed): the waiter's
		// side names the kind, for a registry that never used the key.
		w2, err := rwlock(t, r1, "k").AcquireWrite(ctx, 0)
		mustNil(t, err)
		rd = acquireRW(ctx, rwlock(t, r2, "k"), false)
		waitFor(t, 5*time.Second, "the reader in line", func() bool { return queueLen(t, b, w2.Key(), false) == 1 })
		b.do(t, "DEL", w2.Key())
		info, err = newRegPrefix(t, b.pool(t), pfx).Inspect(ctx, "k")
		mustNil(t, err)
		if info.Kind != "rwlock" || len(info.Holders) != 0 || len(info.Waiters) != 1 || info.Waiters[0].Mode != "read" {
			t.Fatalf("Inspect with a waiting reader alone: %+v", info)
		}
		_ = w2.Release(ctx)
		if le := recvWithin(t, rd, 5*time.Second, "the reader"); le != nil {
			mustNil(t, le.Release(ctx))
		}
	})
}

// FuzzRWLockKeys: any key either fails validation with ErrInvalidKey, or
// names a read-write lock whose hold lands at exactly its key (and its
// readers beside it) in Redis; two keys exclude each other's writers only
// when they are equal.
func FuzzRWLockKeys(f *testing.F) {
	mr, pool := fuzzKeyPairs(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		r1, err := registry.New(pool, "fuzzrw")
		mustNil(t, err)
		defer r1.Close()
		r2, err := registry.New(pool, "fuzzrw")
		mustNil(t, err)
		defer r2.Close()
		la, err := r1.RWLock(a)
		if a == "" || len(a) > registry.MaxKeyLen {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		mustNil(t, err)
		if la.Key() != "fuzzrw:"+a {
			t.Fatalf("Key() = %q, want %q", la.Key(), "fuzzrw:"+a)
		}
		le, err := la.TryAcquireRead(context.Background(), 0)
		mustNil(t, err)
		defer le.Release(context.Background())
		if !mr.Exists("fuzzrw:"+a) || !mr.Exists(wire.Layout{Registry: "fuzzrw"}.ReadersKey("fuzzrw:"+a)) {
			t.Fatalf("key %q or its readers not in Redis", "fuzzrw:"+a)
		}
		lb, err := r2.RWLock(b)
		if err != nil {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		w, err := lb.TryAcquireWrite(context.Background(), 0)
		if got := err == nil; got == (a == b) {
			t.Fatalf("keys %q and %q: TryAcquireWrite beside a reader = %v", a, b, err)
		}
		if w != nil {
			mustNil(t, w.Release(context.Background()))
		}
	})
}

// Bad input is an error matching its sentinel, and nothing is sent: a TTL
// out of range, a bad key, a Redlock registry.
func TestRWLockBadInput(t *testing.T) {
	b := realBackend()
	cp := &redistest.CountingPool{Pool: b.pool(t)}
	r := newReg(t, cp)
	l := rwlock(t, r, "k")
	for _, ttl := range []time.Duration{time.Millisecond, registry.MaxDuration + time.Hour} {
		for name, acquire := range map[string]func(context.Context, time.Duration) (*registry.Lease, error){
			"AcquireRead": l.AcquireRead, "AcquireWrite": l.AcquireWrite, "TryAcquireRead": l.TryAcquireRead, "TryAcquireWrite": l.TryAcquireWrite} {
			if _, err := acquire(bg(t), ttl); !errors.Is(err, registry.ErrInvalidConfig) {
				t.Fatalf("%s with ttl %v: %v, want ErrInvalidConfig", name, ttl, err)
			}
		}
	}
	if _, err := r.RWLock(""); !errors.Is(err, registry.ErrInvalidKey) {
		t.Fatalf("RWLock(\"\"): %v", err)
	}
	if n := len(cp.Commands()); n != 0 {
		t.Fatalf("bad input sent %d commands: %v", n, cp.Commands())
	}
	var clients []registry.Client
	for range 3 {
		clients = append(clients, registry.NewPoolClient(b.pool(t)))
	}
	rl := newRedlock(t, clients, prefix(t))
	if _, err := rl.RWLock("k"); !errors.Is(err, registry.ErrInvalidConfig) {
		t.Fatalf("RWLock on Redlock: %v", err)
	}
}

// readLoop runs n goroutines on l, each taking back-to-back read leases of
// section, staggered, until stop.
func readLoop(ctx context.Context, l *registry.RWLock, n int, section, offset time.Duration, stop chan struct{}, wg *sync.WaitGroup) {
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(offset + time.Duration(i)*section/time.Duration(n))
			for {
				select {
				case <-stop:
					return
				default:
				}
				le, err := l.AcquireRead(ctx, 0)
				if err != nil {
					return
				}
				time.Sleep(section) // a long read, always overlapping another
				_ = le.Release(context.Background())
			}
		}()
	}
}

// A writer that polls is not starved by readers whose long sections always
// overlap: once readers hold the key, its entry holds up the readers
// behind it whether or not its poll is due (an adversarial review found a
// SpinLock writer kept out for good when only a writer due soon did).
func TestRWLockPollingWriterNotStarved(t *testing.T) {
	for _, c := range [][2]registry.LockType{{registry.SpinLock, registry.SpinLock}, {registry.PubSubLock, registry.SpinLock}, {registry.SpinLock, registry.PubSubLock}} {
		rt, wt := c[0], c[1]
		t.Run("readers "+rt.String()+" writer "+wt.String(), func(t *testing.T) {
			b := realBackend()
			pfx := prefix(t)
			ctx := bg(t)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range 3 {
				readLoop(ctx, rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(rt)), "k"), 6, 200*time.Millisecond, time.Duration(i)*20*time.Millisecond, stop, &wg)
			}
			defer func() { close(stop); wg.Wait() }()
			time.Sleep(100 * time.Millisecond)
			w := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(wt)), "k")
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			t0 := time.Now()
			le, err := w.AcquireWrite(wctx, 0)
			if err != nil {
				t.Fatalf("a %v writer kept out by %v readers for %v: %v", wt, rt, time.Since(t0), err)
			}
			t.Logf("the writer got in after %v", time.Since(t0))
			mustNil(t, le.Release(ctx))
		})
	}
}

// A Downgrade whose reply is lost to a timeout asks again (the script is
// safe to run twice) and succeeds; one whose outcome stays unknown leaves
// the lease a reader's, and says so: never a writer beside readers (an
// adversarial review found the lease still a writer's, with another
// registry's reader in).
func TestRWLockDowngradeReplyLost(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	pfx := prefix(t)
	lc := &loseReply{Client: registry.NewPoolClient(b.pool(t)), name: "rwdowngrade", err: context.DeadlineExceeded}
	a := rwlock(t, newRegClientPrefix(t, lc, pfx), "k")
	c := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
	w, err := a.AcquireWrite(ctx, 0)
	mustNil(t, err)
	lc.armed.Store(true)
	mustNil(t, w.Downgrade(ctx))
	r, err := c.TryAcquireRead(ctx, 0)
	mustNil(t, err) // beside the downgraded lease
	local, err := a.TryAcquireRead(ctx, 0)
	mustNil(t, err) // this registry's readers join it
	if _, err := c.TryAcquireWrite(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
		t.Fatalf("a writer beside the downgraded lease: %v", err)
	}
	if err := w.Downgrade(ctx); !errors.Is(err, registry.ErrNotOwner) {
		t.Fatalf("Downgrade of a read lease: %v", err)
	}
	for _, le := range []*registry.Lease{r, local, w} {
		mustNil(t, le.Release(ctx))
	}
}

// A reader queued behind a writer that waits for a long reader sleeps
// until its turn (the writer's release tells it), not one turn window at a
// time: an adversarial review counted 164 scripts a second for two
// waiters.
func TestRWLockReaderBehindWaitingWriterSleeps(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	pfx := prefix(t)
	ps := registry.WithLockType(registry.PubSubLock)
	a := rwlock(t, newRegPrefix(t, b.pool(t), pfx, ps), "k")
	w := rwlock(t, newRegPrefix(t, b.pool(t), pfx, ps), "k")
	c := rwlock(t, newRegPrefix(t, b.pool(t), pfx, ps), "k")
	long, err := a.AcquireRead(ctx, 0)
	mustNil(t, err)
	wl := acquireRW(ctx, w, true)
	waitFor(t, 5*time.Second, "the writer in line", func() bool { return queueLen(t, b, a.Key(), false) == 1 })
	rl := acquireRW(ctx, c, false)
	waitFor(t, 5*time.Second, "the reader in line", func() bool { return queueLen(t, b, a.Key(), false) == 2 })
	conn := b.pool(t).Get()
	defer conn.Close()
	scripts := func() int64 {
		return redistest.CommandCalls(conn, func(n string) bool { return n == "evalsha" || n == "eval" })
	}
	n0 := scripts()
	time.Sleep(time.Second) // what two waiters cost in a second
	if n := scripts() - n0; n > 30 {
		t.Fatalf("%d scripts in 1s while a writer and a reader wait", n)
	}
	mustNil(t, long.Release(ctx))
	le := recvWithin(t, wl, 5*time.Second, "the writer")
	mustNil(t, le.Release(ctx))
	le = recvWithin(t, rl, 5*time.Second, "the reader, told by the writer's release")
	mustNil(t, le.Release(ctx))
}

// A reader that takes the key in the script that pruned its last expired
// reader marks the key as read again: a writer does not get in beside it.
func TestRWLockReaderAfterExpiredReaders(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	pfx := prefix(t)
	a := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
	w := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
	c := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")                                       // polls: due at the dead reader's expiry
	x, err := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k").AcquireRead(ctx, 10*time.Second) // keeps the key's TTL long
	mustNil(t, err)
	_, err = a.AcquireRead(ctx, 60*time.Millisecond) // dies: never released nor renewed
	mustNil(t, err)
	wctx, cancel := context.WithTimeout(ctx, 40*time.Millisecond)
	defer cancel()
	wl := acquireRW(wctx, w, true)
	waitFor(t, 5*time.Second, "the writer in line", func() bool { return queueLen(t, b, a.Key(), false) == 1 })
	rl := acquireRW(ctx, c, false)
	waitFor(t, 5*time.Second, "the reader in line", func() bool { return queueLen(t, b, a.Key(), false) == 2 })
	mustNil(t, x.Release(ctx))
	if le := recvWithin(t, wl, 5*time.Second, "the writer to give up"); le != nil {
		t.Fatal("the writer got in beside a reader")
	}
	r := leaseWithin(t, rl, 5*time.Second, "the reader, after the dead reader's TTL")
	if n := b.do(t, "HEXISTS", a.Key(), "r"); n != int64(1) {
		t.Fatalf("the key is not marked read while a reader holds it: HEXISTS %v", n)
	}
	if _, err := w.TryAcquireWrite(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
		t.Fatalf("a writer beside the reader: %v", err)
	}
	mustNil(t, r.Release(ctx))
}

// ReleaseAfter leaves a write hold in Redis for d: another registry's
// writer gets in once it has expired, not before;
// a read lease that is not the last on its registry's hold keeps the hold
// at least d after the others leave.
func TestRWLockReleaseAfter(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	pfx := prefix(t)
	a := rwlock(t, newRegPrefix(t, b.pool(t), pfx), "k")
	c := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second)), "k")
	w, err := a.AcquireWrite(ctx, 0)
	mustNil(t, err)
	start := time.Now()
	mustNil(t, w.ReleaseAfter(ctx, 300*time.Millisecond))
	got := acquireRW(ctx, c, true)
	le := recvWithin(t, got, 5*time.Second, "the writer, after the write hold expired")
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Fatalf("the writer got in %v after ReleaseAfter(300ms) (it sleeps until the expiry it was told)", d)
	}
	mustNil(t, le.Release(ctx))

	r1, err := a.AcquireRead(ctx, 0)
	mustNil(t, err)
	r2, err := a.AcquireRead(ctx, 0) // joins r1's hold
	mustNil(t, err)
	mustNil(t, r1.ReleaseAfter(ctx, 300*time.Millisecond))
	start = time.Now()
	mustNil(t, r2.Release(ctx)) // the last lease: the hold stays for what r1 asked
	got = acquireRW(ctx, c, true)
	le = recvWithin(t, got, 5*time.Second, "the writer, after the kept read hold expired")
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Fatalf("the writer got in %v after the last read lease left, want the kept 300ms", d)
	}
	mustNil(t, le.Release(ctx))
}

// With WithHashTag, and with a brace key in the default form, every key of
// a read-write lock lies in its key's Cluster slot.
func TestRWLockKeysInOneSlot(t *testing.T) {
	b := realBackend()
	ctx := bg(t)
	for _, opts := range [][]registry.Option{nil, {registry.WithHashTag()}} {
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		l := rwlock(t, r, "user:{42}")
		le, err := l.AcquireRead(ctx, 0)
		mustNil(t, err)
		w := wire.Layout{Registry: pfx, HashTag: len(opts) > 0}
		rk := w.ReadersKey(l.Key())
		if b.do(t, "EXISTS", rk) != int64(1) || wire.Slot(rk) != wire.Slot(l.Key()) || wire.Slot(w.QueueKey(l.Key())) != wire.Slot(l.Key()) {
			t.Fatalf("hash tag %v: readers %q (slot %d) beside %q (slot %d)", len(opts) > 0, rk, wire.Slot(rk), l.Key(), wire.Slot(l.Key()))
		}
		mustNil(t, le.Release(ctx))
	}
}

// rwacquire.lua gives a free key with nobody in line before it defines any
// rule (its uncontended path), and says so with a plain 1; with a fencing
// token to take it runs the full path. Either way a writer's token is in
// field 'w' and the key expires after the TTL; a reader's expiry in the
// readers' set is the server's clock plus the TTL, field 'r' is set, and
// both keys expire after the TTL.
func TestRWLockUncontendedScriptPath(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(7, registry.RWAcquireSource)
		c := b.pool(t).Get()
		defer c.Close()
		for i, tc := range []struct {
			name, side, fence string
			plain             bool
		}{
			{"reader", "r", "0", true},
			{"writer", "w", "0", true},
			{"fenced reader", "r", "1", false},
			{"fenced writer", "w", "1", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				k := fmt.Sprintf("rwfast-%d", i)
				keys := []any{k, k + ":q", k + ":i", k + ":t", k + ":p", k + ":f", k + ":r"}
				args := append(keys, "reg:1", 2000, "reg/1/"+tc.side, 2, 100, 5, tc.fence, "x-turn:", 30, 30, 5, 1, tc.side, 0)
				v, err := script.Do(c, args...)
				mustNil(t, err)
				if n, plain := v.(int64); plain != tc.plain || (plain && n != 1) {
					t.Fatalf("reply %v; want the plain 1: %v", v, tc.plain)
				}
				expires := []any{k}
				if tc.side == "w" {
					if w, err := redis.String(c.Do("HGET", k, "w")); err != nil || w != "reg:1" {
						t.Fatalf("field w is %q (%v); want the token", w, err)
					}
				} else {
					if r, err := redis.String(c.Do("HGET", k, "r")); err != nil || r != "1" {
						t.Fatalf("field r is %q (%v); want 1", r, err)
					}
					now, err := redis.Int64s(c.Do("TIME"))
					mustNil(t, err)
					score, err := redis.Float64(c.Do("ZSCORE", k+":r", "reg:1"))
					mustNil(t, err)
					if want := float64(now[0]*1000+now[1]/1000) + 2000; score < want-1000 || score > want+1 {
						t.Fatalf("the reader expires at %.0f; want about %.0f (the server's clock + TTL)", score, want)
					}
					expires = append(expires, k+":r")
				}
				for _, key := range expires {
					if pttl, err := redis.Int64(c.Do("PTTL", key)); err != nil || pttl <= 1000 || pttl > 2000 {
						t.Fatalf("%s: PTTL %d (%v); want the TTL, 2000 ms", key, pttl, err)
					}
				}
			})
		}
	})
}

// A release tells the waiters of other registries that their turn has
// come (on their turn channels): a reader waiting for a writer, and a
// writer waiting for a reader, enter at once, not at their 10 s poll.
func TestRWLockReleaseTellsWaiters(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := bg(t)
		_, ls, _ := toldRWLocks(t, b, 2)
		a, c := ls[0], ls[1]
		for _, writerFirst := range []bool{true, false} {
			take := a.TryAcquireRead
			if writerFirst {
				take = a.TryAcquireWrite
			}
			held, err := take(ctx, 0)
			mustNil(t, err)
			waiter := acquireRW(ctx, c, !writerFirst)
			notWithin(t, waiter, 200*time.Millisecond, "the waiter beside the holder") // it queued, and sleeps
			mustNil(t, held.Release(ctx))
			le := leaseWithin(t, waiter, 3*time.Second, "the waiter, told of the release")
			mustNil(t, le.Release(ctx))
		}
	})
}

// toldRWLocks returns the RWLock "k" of n registries on one prefix
// (PubSubLock, polling every 10 s: a waiter gets in when told), the first
// registry (for Inspect), and the prefix.
func toldRWLocks(t *testing.T, b *backend, n int) (*registry.Registry, []*registry.RWLock, string) {
	t.Helper()
	pfx := prefix(t)
	var first *registry.Registry
	ls := make([]*registry.RWLock, n)
	for i := range ls {
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))
		if i == 0 {
			first = r
		}
		ls[i] = rwlock(t, r, "k")
	}
	return first, ls, pfx
}

// leaseWithin returns the lease that an acquisition (acquireRW) sends on
// ch within d, and fails the test if none comes or the acquisition failed.
func leaseWithin(t *testing.T, ch <-chan *registry.Lease, d time.Duration, what string) *registry.Lease {
	t.Helper()
	le := recvWithin(t, ch, d, what)
	if le == nil {
		t.Fatalf("%s: the acquisition failed", what)
	}
	return le
}

// waitersOf polls Inspect of key until it shows n waiters, within 5 s.
func waitersOf(t *testing.T, r *registry.Registry, key string, n int) {
	t.Helper()
	ctx := bg(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := r.Inspect(ctx, key)
		mustNil(t, err)
		if len(info.Waiters) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) shows %d waiters after 5s, want %d: %+v", key, len(info.Waiters), n, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRWLockLateReaderQueuesBehindWriter: the readers queued behind a
// writer enter together when it leaves, and a reader of the same registry
// that comes after them does not share their hold ahead of a writer that
// waits behind them: it queues behind that writer (phase-fair). The
// writer queued while the first writer held the key, when no reader held
// it to be told.
func TestRWLockLateReaderQueuesBehindWriter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := bg(t)
		ra, ls, _ := toldRWLocks(t, b, 3)
		a, b1, c := ls[0], ls[1], ls[2]
		w1, err := b1.TryAcquireWrite(ctx, 0)
		mustNil(t, err)
		r1 := acquireRW(ctx, a, false)
		waitersOf(t, ra, "k", 1)
		w2 := acquireRW(ctx, c, true)
		waitersOf(t, ra, "k", 2)
		mustNil(t, w1.Release(ctx))
		le1 := leaseWithin(t, r1, 3*time.Second, "the reader queued behind the first writer")
		r2 := acquireRW(ctx, a, false)
		notWithin(t, r2, 300*time.Millisecond, "a reader that came after the second writer queued, beside the first reader")
		mustNil(t, le1.Release(ctx))
		lw2 := leaseWithin(t, w2, 3*time.Second, "the second writer, once the first reader left")
		notWithin(t, r2, 100*time.Millisecond, "the late reader beside the second writer")
		mustNil(t, lw2.Release(ctx))
		le2 := leaseWithin(t, r2, 3*time.Second, "the late reader, once the second writer left")
		mustNil(t, le2.Release(ctx))
	})
}

// TestRWLockDowngradeGatesLateReaders: a writer that queued while the key
// was written (no reader held it to be told) is not passed by a reader of
// the downgrading registry that comes after the downgrade: it queues behind
// the writer (TryAcquireRead: ErrNotObtained) instead of sharing the hold.
func TestRWLockDowngradeGatesLateReaders(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := bg(t)
		ra, ls, _ := toldRWLocks(t, b, 2)
		a, c := ls[0], ls[1]
		wa, err := a.TryAcquireWrite(ctx, 0)
		mustNil(t, err)
		cw := acquireRW(ctx, c, true)
		waitersOf(t, ra, "k", 1)
		mustNil(t, wa.Downgrade(ctx))
		late, err := a.TryAcquireRead(ctx, 0)
		if err == nil {
			_ = late.Release(ctx)
			t.Fatal("a reader that came after the downgrade shared the hold ahead of the waiting writer")
		}
		mustIs(t, err, registry.ErrNotObtained)
		mustNil(t, wa.Release(ctx))
		lw := leaseWithin(t, cw, 3*time.Second, "the waiting writer, once the downgraded hold was released")
		mustNil(t, lw.Release(ctx))
	})
}

// TestRWLockReadersOnlyShareHold: a reader let in while only readers stay
// in line behind it (a poller passed over, not due yet) leaves its hold
// open to its registry's later readers: they share it (one token in Redis),
// with no round trip of their own.
func TestRWLockReadersOnlyShareHold(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		ctx := bg(t)
		ra, ls, pfx := toldRWLocks(t, b, 2)
		a, w := ls[0], ls[1]
		d := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.SpinLock), registry.WithIdleBetweenTries(time.Second)), "k")
		lw, err := w.TryAcquireWrite(ctx, 0)
		mustNil(t, err)
		r1 := acquireRW(ctx, a, false)
		waitersOf(t, ra, "k", 1)
		rd := acquireRW(ctx, d, false)
		waitersOf(t, ra, "k", 2)
		mustNil(t, lw.Release(ctx))
		le1 := leaseWithin(t, r1, 3*time.Second, "the first reader, once the writer left")
		le2, err := a.TryAcquireRead(ctx, 0)
		mustNil(t, err)
		info, err := ra.Inspect(ctx, "k")
		mustNil(t, err)
		if len(info.Holders) != 1 {
			t.Errorf("the registry's two readers hold %d tokens, want 1 (no writer waits): %+v", len(info.Holders), info.Holders)
		}
		mustNil(t, le1.Release(ctx))
		mustNil(t, le2.Release(ctx))
		le3 := leaseWithin(t, rd, 5*time.Second, "the polling reader")
		mustNil(t, le3.Release(ctx))
	})
}

// TestRWLockRefusedTryScriptPath: rwacquire.lua refuses a caller that does
// not wait on a key a writer holds before it defines any rule, with the
// sleep the full path gives a caller not in line, and queues none; a
// caller that listens is still queued.
func TestRWLockRefusedTryScriptPath(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(7, registry.RWAcquireSource)
		c := b.pool(t).Get()
		defer c.Close()
		for i, tc := range []struct {
			name, side string
			pttl       int // the writer's, ms
			mode       int
			sleepAbout int // the sleep in the reply, within 20 ms below
			queued     bool
		}{
			{"reader", "r", 60000, 0, 100 - 7, false},
			{"writer, the holder expiring before a poll", "w", 50, 0, 51, false},
			{"a listening reader", "r", 60000, 2, 0, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				k := fmt.Sprintf("rwtry-%d", i)
				_, err := c.Do("HSET", k, "w", "other:1")
				mustNil(t, err)
				_, err = c.Do("PEXPIRE", k, tc.pttl)
				mustNil(t, err)
				keys := []any{k, k + ":q", k + ":i", k + ":t", k + ":p", k + ":f", k + ":r"}
				args := append(keys, "reg:1", 2000, "reg/1/"+tc.side, tc.mode, 100, 7, 0, "x-turn:", 30, 30, 5, 1, tc.side, 0)
				x, err := redis.Int64s(script.Do(c, args...))
				mustNil(t, err)
				if len(x) != 3 || x[0] != 0 || !tc.queued && (x[1] > int64(tc.sleepAbout) || x[1] < int64(tc.sleepAbout)-20) {
					t.Fatalf("reply %v; want {0, about %d, after}", x, tc.sleepAbout)
				}
				if queued := x[2] != -1; queued != tc.queued {
					t.Fatalf("reply %v: queued %v, want %v", x, queued, tc.queued)
				}
				n, err := redis.Int(c.Do("ZCARD", k+":q"))
				mustNil(t, err)
				if (n == 1) != tc.queued {
					t.Fatalf("%d waiters in line; want queued: %v", n, tc.queued)
				}
			})
		}
	})
}
