package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// semaphore returns the semaphore of r on key with n permits.
func semaphore(t *testing.T, r *registry.Registry, key string, n int) *registry.Semaphore {
	t.Helper()
	s, err := r.Semaphore(key, n)
	if err != nil {
		t.Fatalf("Semaphore(%q, %d): %v", key, n, err)
	}
	return s
}

// acquirePermit acquires a permit of s in a new goroutine and returns the
// lease on a channel (nil on error).
func acquirePermit(ctx context.Context, s *registry.Semaphore, ttl time.Duration) <-chan *registry.Lease {
	got := make(chan *registry.Lease, 1)
	go func() {
		le, err := s.Acquire(ctx, ttl)
		if err != nil {
			le = nil
		}
		got <- le
	}()
	return got
}

// zcard returns how many permits the semaphore key holds in Redis.
func zcard(t *testing.T, b *backend, key string) int {
	t.Helper()
	n, err := redis.Int(b.do(t, "ZCARD", key), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// N permits are held at once and no more: the next TryAcquire fails with
// ErrNotObtained, an Acquire waits until a Release, each permit has a
// fencing token of its own from one increasing counter, and nothing is left
// in Redis once the last holder leaves.
func TestSemaphorePermits(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				r := newRegPrefix(t, b.pool(t), pfx, registry.WithFencing(), registry.WithLockType(lt))
				s := semaphore(t, r, "exports", 2)
				if s.Permits() != 2 || s.Key() != pfx+":exports" {
					t.Fatalf("Permits %d, Key %q", s.Permits(), s.Key())
				}
				a, err := s.Acquire(bg(t), 0)
				mustNil(t, err)
				c, err := s.TryAcquire(bg(t), 0)
				mustNil(t, err)
				if a.Token() <= 0 || c.Token() <= a.Token() {
					t.Fatalf("tokens %d then %d, want increasing", a.Token(), c.Token())
				}
				if n := zcard(t, b, s.Key()); n != 2 {
					t.Fatalf("%d permits in Redis, want 2", n)
				}
				_, err = s.TryAcquire(bg(t), 0)
				mustIs(t, err, registry.ErrNotObtained)

				// Another registry (process) waits too, and so does a
				// lease of this one.
				r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithFencing(), registry.WithLockType(lt))
				s2 := semaphore(t, r2, "exports", 2)
				_, err = s2.TryAcquire(bg(t), 0)
				mustIs(t, err, registry.ErrNotObtained)
				other := acquirePermit(bg(t), s2, 0)
				notWithin(t, other, 200*time.Millisecond, "a third permit")
				mustNil(t, a.Release(bg(t)))
				d := recvWithin(t, other, 5*time.Second, "the permit that a Release gave back")
				if d == nil || d.Token() <= c.Token() {
					t.Fatalf("lease %v after a release", d)
				}
				mustIs(t, a.Release(bg(t)), registry.ErrNotOwner)
				if a.Token() != 0 {
					t.Errorf("Token %d after Release, want 0", a.Token())
				}
				mustNil(t, c.Release(bg(t)))
				mustNil(t, d.Release(bg(t)))
				assertNoKeys(t, b, pfx)
			})
		})
	}
}

// assertNoKeys fails if any key of the registry key is left in Redis.
func assertNoKeys(t *testing.T, b *backend, registryKey string) {
	t.Helper()
	waitFor(t, 5*time.Second, "no keys left of "+registryKey, func() bool {
		all, err := redis.Strings(b.do(t, "KEYS", "*"+wire.GlobEscape(registryKey)+"*"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string // a registry's label (WithLabel) lives with the registry, not with a key
		for _, k := range all {
			if !strings.HasPrefix(k, wire.Layout{Registry: registryKey}.LabelKey("")) {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			t.Logf("left: %v", keys)
		}
		return len(keys) == 0
	})
}

// Bad input is refused with a clear error and nothing is sent.
func TestSemaphoreBadInput(t *testing.T) {
	mr := newMiniredis(t)
	cp := &redistest.CountingPool{Pool: redistest.NewPool(mr.Addr())}
	r := newReg(t, cp)
	for _, n := range []int{0, -1} {
		_, err := r.Semaphore("k", n)
		mustIs(t, err, registry.ErrInvalidConfig)
	}
	_, err := r.Semaphore("", 2)
	mustIs(t, err, registry.ErrInvalidKey)
	s := semaphore(t, r, "k", 2)
	_, err = s.Acquire(bg(t), time.Millisecond)
	mustIs(t, err, registry.ErrInvalidConfig)
	_, err = s.TryAcquire(bg(t), registry.MaxDuration+1)
	mustIs(t, err, registry.ErrInvalidConfig)
	_, err = r.Semaphore("k", 3) // cached with 2
	mustIs(t, err, registry.ErrInvalidConfig)
	_, err = r.Obtain("k") // a semaphore here
	mustIs(t, err, registry.ErrInvalidKey)
	obtain(t, r, "lock")
	_, err = r.Semaphore("lock", 2)
	mustIs(t, err, registry.ErrInvalidKey)
	if s2 := semaphore(t, r, "k", 2); s2 != s {
		t.Error("Semaphore did not return the cached semaphore")
	}
	if cmds := cp.Commands(); len(cmds) != 0 {
		t.Errorf("commands sent for bad input: %v", cmds)
	}
	ctx, cancel := context.WithCancel(bg(t))
	cancel()
	_, err = s.Acquire(ctx, 0)
	mustIs(t, err, context.Canceled)
	r.Close()
	_, err = r.Semaphore("k", 2)
	mustIs(t, err, registry.ErrClosed)
	_, err = s.Acquire(bg(t), 0)
	mustIs(t, err, registry.ErrClosed)
}

// A Redlock registry refuses a semaphore, and so does one that waits for
// replicas.
func TestSemaphoreRefusedWhereUnsupported(t *testing.T) {
	mr1, mr2, mr3 := newMiniredis(t), newMiniredis(t), newMiniredis(t)
	rl, err := registry.NewRedlock([]registry.Client{registry.NewPoolClient(redistest.NewPool(mr1.Addr())), registry.NewPoolClient(redistest.NewPool(mr2.Addr())), registry.NewPoolClient(redistest.NewPool(mr3.Addr()))}, prefix(t))
	mustNil(t, err)
	defer rl.Close()
	_, err = rl.Semaphore("k", 2)
	mustIs(t, err, registry.ErrInvalidConfig)
	ra := newReg(t, redistest.NewPool(mr1.Addr()), registry.WithReplicaAck(1, time.Second))
	_, err = ra.Semaphore("k", 2)
	mustIs(t, err, registry.ErrInvalidConfig)
}

// The key of a lock (a string) is not a semaphore: Acquire and
// TryAcquire fail at once with ErrWrongKind, naming both kinds (and the
// server's WRONGTYPE stays in the chain); and the other way round: a lock,
// its TryLock and a lease on a semaphore's key.
func TestSemaphoreWrongType(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pool := b.pool(t)
		pfx := prefix(t)
		r := newRegPrefix(t, pool, pfx)
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		defer l.Unlock()
		r2 := newRegPrefix(t, pool, pfx)
		s := semaphore(t, r2, "k", 2)
		ctx, cancel := context.WithTimeout(bg(t), 5*time.Second)
		defer cancel()
		wrong := func(what string, err error, is, not string) {
			t.Helper()
			var re *registry.ReplyError
			if !errors.Is(err, registry.ErrWrongKind) || ctx.Err() != nil || !errors.As(err, &re) ||
				!strings.Contains(err.Error(), "is a "+is+", not a "+not) {
				t.Fatalf("%s: %v, want ErrWrongKind at once, naming both kinds", what, err)
			}
		}
		_, err := s.Acquire(ctx, 0)
		wrong("Acquire on a lock's key", err, "lock", "semaphore")
		_, err = s.TryAcquire(ctx, 0)
		wrong("TryAcquire on a lock's key", err, "lock", "semaphore")

		s2 := semaphore(t, r, "s", 2)
		le, err := s2.Acquire(ctx, 0)
		mustNil(t, err)
		defer func() { mustNil(t, le.Release(bg(t))) }()
		l2 := obtain(t, r2, "s")
		wrong("LockContext on a semaphore's key", l2.LockContext(ctx), "semaphore", "lock")
		wrong("TryLockContext on a semaphore's key", l2.TryLockContext(ctx), "semaphore", "lock")
		_, err = r2.Acquire(ctx, "s", 0)
		wrong("Registry.Acquire on a semaphore's key", err, "semaphore", "lock")
		_, err = r2.TryAcquire(ctx, "s", 0)
		wrong("Registry.TryAcquire on a semaphore's key", err, "semaphore", "lock")
	})
}

// FuzzSemaphoreKeys: any key either fails validation with ErrInvalidKey,
// or names a semaphore whose permits land at exactly its key in Redis, and
// which excludes a second permit of one permit (on another registry) on the
// same key, never on a different one.
func FuzzSemaphoreKeys(f *testing.F) {
	mr, pool := fuzzKeyPairs(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		r1, err := registry.New(pool, "fuzzsem")
		mustNil(t, err)
		defer r1.Close()
		r2, err := registry.New(pool, "fuzzsem")
		mustNil(t, err)
		defer r2.Close()
		sa, err := r1.Semaphore(a, 1)
		if a == "" || len(a) > registry.MaxKeyLen {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		mustNil(t, err)
		if sa.Key() != "fuzzsem:"+a {
			t.Fatalf("Key() = %q, want %q", sa.Key(), "fuzzsem:"+a)
		}
		le, err := sa.TryAcquire(context.Background(), 0)
		mustNil(t, err)
		defer le.Release(context.Background())
		if !mr.Exists("fuzzsem:" + a) {
			t.Fatalf("key %q not in Redis", "fuzzsem:"+a)
		}
		sb, err := r2.Semaphore(b, 1)
		if err != nil {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		lb, err := sb.TryAcquire(context.Background(), 0)
		if got := err == nil; got == (a == b) {
			t.Fatalf("keys %q and %q: second TryAcquire = %v", a, b, err)
		}
		if lb != nil {
			mustNil(t, lb.Release(context.Background()))
		}
	})
}
