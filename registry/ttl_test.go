package registry_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// pttl returns the remaining TTL of key in ms (-2: no key).
func pttl(t *testing.T, b *backend, key string) int64 {
	t.Helper()
	n, err := redis.Int64(b.do(t, "PTTL", key), nil)
	mustNil(t, err)
	return n
}

// countingReg returns a registry on a counting pool, warmed up: its first
// obtain (with the eviction check's INFO) is done, and the count is empty.
func countingReg(t *testing.T, b *backend, opts ...registry.Option) (*registry.Registry, *redistest.CountingPool) {
	t.Helper()
	cp := &redistest.CountingPool{Pool: b.pool(t)}
	r := newReg(t, cp, opts...)
	w := obtain(t, r, "warm-up")
	mustNil(t, w.LockContext(bg(t)))
	mustNil(t, w.UnlockContext(bg(t)))
	cp.Commands()
	return r, cp
}

// Two keys of one registry locked with LockFor at 1s and 30s have those
// TTLs in Redis.
func TestLockForSetsTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		short, long := obtain(t, r, "short"), obtain(t, r, "long")
		mustNil(t, short.LockFor(bg(t), time.Second))
		defer short.Unlock()
		mustNil(t, long.LockFor(bg(t), 30*time.Second))
		defer long.Unlock()
		if p := pttl(t, b, short.Key()); p <= 500 || p > 1000 {
			t.Errorf("LockFor(1s): PTTL %d ms", p)
		}
		if p := pttl(t, b, long.Key()); p <= 29000 || p > 30000 {
			t.Errorf("LockFor(30s): PTTL %d ms", p)
		}
	})
}

// A TTL below MinExpireAfter (1ms, 0, ...) or above MaxDuration is refused
// with ErrInvalidConfig before any command is sent, by LockFor and by
// RenewLockFor.
func TestLockForInvalidTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r, cp := countingReg(t, b)
		l := obtain(t, r, "k")
		for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond, time.Millisecond, registry.MinExpireAfter - 1, registry.MaxDuration + 1} {
			mustIs(t, l.LockFor(bg(t), ttl), registry.ErrInvalidConfig)
			mustIs(t, r.RenewLockFor(bg(t), "k", ttl), registry.ErrInvalidConfig)
		}
		if cmds := cp.Commands(); len(cmds) != 0 {
			t.Fatalf("commands sent for invalid TTLs: %v", cmds)
		}
	})
}

// A reentrant LockFor sends no command and leaves the outer hold's TTL.
func TestReentrantLockForSendsNothing(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r, cp := countingReg(t, b)
		l := obtain(t, r, "k")
		mustNil(t, l.LockFor(bg(t), 30*time.Second))
		defer l.Unlock()
		cp.Commands()
		mustNil(t, l.LockFor(bg(t), time.Second))
		l.Unlock()
		if cmds := cp.Commands(); len(cmds) != 0 {
			t.Fatalf("a reentrant LockFor sent %v", cmds)
		}
		if p := pttl(t, b, l.Key()); p <= 1000 {
			t.Fatalf("a reentrant LockFor(1s) changed the outer hold's TTL: PTTL %d ms", p)
		}
	})
}

// RenewLockFor sets the key's TTL, and later renewals (RenewLock, and the
// watchdog's) keep the new TTL.
func TestRenewLockFor(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithExpireAfter(time.Minute))
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		defer l.Unlock()
		mustNil(t, r.RenewLockFor(bg(t), "k", 2*time.Second))
		if p := pttl(t, b, l.Key()); p <= 1000 || p > 2000 {
			t.Fatalf("after RenewLockFor(2s): PTTL %d ms", p)
		}
		mustNil(t, r.RenewLock(bg(t), "k"))
		if p := pttl(t, b, l.Key()); p <= 1000 || p > 2000 {
			t.Fatalf("RenewLock after RenewLockFor(2s): PTTL %d ms, want the new TTL", p)
		}
		mustIs(t, r.RenewLockFor(bg(t), "other", time.Second), registry.ErrNotOwner)
	})
}

// With WithAutoRenew each hold is renewed at a third of its own TTL: a 1s
// hold outlives 4s while held, RenewLockFor's TTL is kept by the watchdog,
// and the keys are gone after the release.
func TestAutoRenewOwnTTL(t *testing.T) {
	b := realBackend()
	r := newReg(t, b.pool(t), registry.WithAutoRenew()) // expireAfter 60s: renewed every 20s
	short, changed := obtain(t, r, "short"), obtain(t, r, "changed")
	mustNil(t, short.LockFor(bg(t), time.Second))
	mustNil(t, changed.LockContext(bg(t)))
	mustNil(t, r.RenewLockFor(bg(t), "changed", 900*time.Millisecond))
	end := time.Now().Add(4 * time.Second)
	for time.Now().Before(end) { // bounded: 4s of checks, 50ms apart
		ps, pc := pttl(t, b, short.Key()), pttl(t, b, changed.Key())
		if ps <= 0 || ps > 1000 || pc <= 0 || pc > 900 {
			t.Fatalf("while held: PTTLs %d and %d ms; want (0, 1000] and (0, 900]", ps, pc)
		}
		select {
		case <-short.Lost():
			t.Fatal("the 1s hold was lost while the watchdog renews it")
		case <-time.After(50 * time.Millisecond):
		}
	}
	mustNil(t, short.UnlockContext(bg(t)))
	mustNil(t, changed.UnlockContext(bg(t)))
	if pttl(t, b, short.Key()) != -2 || pttl(t, b, changed.Key()) != -2 {
		t.Fatal("a key outlived its release")
	}
}

// A hold handed over locally from a 30s holder to a LockFor(2s) waiter has
// the waiter's TTL.
func TestHandOffTakesWaitersTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t)), "k")
		mustNil(t, l.LockFor(bg(t), 30*time.Second))
		w := lockAndHold(l, func() error { return l.LockFor(bg(t), 2*time.Second) })
		waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return l.Waiters() == 1 })
		mustNil(t, l.UnlockContext(bg(t)))
		recvWithin(t, w.got, 5*time.Second, "the hand-off")
		if p := pttl(t, b, l.Key()); p <= 0 || p > 2000 {
			t.Fatalf("after the hand-off to LockFor(2s): PTTL %d ms", p)
		}
		mustNil(t, w.unlock(t))
	})
}

// TryLockContext says why it did not get the lock: ErrNotObtained for a
// holder in another registry (after one command: SET NX GET while the key
// is expected free, the obtain script once it was found taken) or in this
// one (at once, no command); another error when Redis is down; nil,
// reentrant, for the holder.
func TestTryLockContext(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, other.LockContext(bg(t)))
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newRegPrefix(t, cp, pfx)
		w := obtain(t, r, "warm-up")
		mustNil(t, w.TryLockContext(bg(t)))
		mustNil(t, w.UnlockContext(bg(t)))
		l := obtain(t, r, "k")
		cp.Commands()
		mustIs(t, l.TryLockContext(bg(t)), registry.ErrNotObtained)
		if cmds := cp.Commands(); !slices.Equal(cmds, []string{"SET"}) {
			t.Fatalf("TryLockContext against another registry's holder sent %v, want one SET", cmds)
		}
		mustIs(t, l.TryLockContext(bg(t)), registry.ErrNotObtained) // the script, loaded on first use
		cp.Commands()
		mustIs(t, l.TryLockContext(bg(t)), registry.ErrNotObtained)
		if cmds := cp.Commands(); !slices.Equal(cmds, []string{"EVALSHA"}) {
			t.Fatalf("TryLockContext against another registry's holder, once the key was found taken, sent %v, want one EVALSHA", cmds)
		}
		other.Unlock()

		mustNil(t, l.TryLockContext(bg(t)))
		mustNil(t, l.TryLockContext(bg(t))) // reentrant
		l.Unlock()
		cp.Commands()
		mustIs(t, inGoroutine(func() error { return l.TryLockContext(bg(t)) }), registry.ErrNotObtained)
		if cmds := cp.Commands(); len(cmds) != 0 {
			t.Fatalf("TryLockContext against a local holder sent %v", cmds)
		}
		l.Unlock()
	})
}

func TestTryLockContextServerDown(t *testing.T) {
	s, pool := ownServer(t)
	r := newReg(t, pool, registry.WithCommandTimeout(300*time.Millisecond), registry.WithLogger(slogFor(&logRecorder{})))
	l := obtain(t, r, "k")
	s.Stop()
	err := l.TryLockContext(bg(t))
	if err == nil || errors.Is(err, registry.ErrNotObtained) {
		t.Fatalf("TryLockContext with the server down = %v, want the Redis error, not ErrNotObtained", err)
	}
	// Had the failure left the local mutex held, another goroutine would
	// get ErrNotObtained without asking Redis.
	if err := inGoroutine(func() error { return l.TryLockContext(bg(t)) }); err == nil || errors.Is(err, registry.ErrNotObtained) {
		t.Fatalf("TryLockContext from another goroutine = %v: the failed one left the lock held", err)
	}
}

// hookClient slows the pass script and, once, deletes the lock key before
// a renewal, to stage the races of a hand-off.
type hookClient struct {
	registry.Client
	addr       string
	passDelay  time.Duration
	delOnRenew atomic.Bool
}

func (c *hookClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "pass" {
		time.Sleep(c.passDelay) // the pass in flight
	}
	if s.Name() == "renew" && c.delOnRenew.Swap(false) {
		_, _ = redistest.Do(c.addr, "DEL", keys[0])
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A RenewLock that waits for a pass in flight does not send the old hold's
// TTL after the pass gave the next goroutine its own: the key keeps the
// next holder's TTL.
func TestRenewDuringPass(t *testing.T) {
	b := realBackend()
	c := &hookClient{Client: registry.NewPoolClient(b.pool(t)), addr: b.addr, passDelay: 300 * time.Millisecond}
	r := newRegClient(t, c)
	l := obtain(t, r, "k")
	mustNil(t, l.LockFor(bg(t), time.Second))
	w := lockAndHold(l, func() error { return l.LockFor(bg(t), 60*time.Second) })
	waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return l.Waiters() == 1 })
	renewed := make(chan error, 1)
	go func() {
		waitFor(t, 5*time.Second, "the pass", func() bool { return l.Phase() == "handing over" })
		renewed <- r.RenewLock(context.Background(), "k") // the pass takes 300ms
	}()
	mustNil(t, l.UnlockContext(bg(t)))
	recvWithin(t, w.got, 5*time.Second, "the hand-off")
	recvWithin(t, renewed, 5*time.Second, "the RenewLock")
	if p := pttl(t, b, l.Key()); p <= 30000 {
		t.Fatalf("after a hand-off to LockFor(60s) and a RenewLock during the pass: PTTL %d ms", p)
	}
	mustNil(t, w.unlock(t))
}

// A RenewLockFor to a shorter TTL whose reply is lost may have run: the
// hold's validity shrinks as if it had, so Lost closes before the key could
// expire.
func TestRenewLockForShorterReplyLost(t *testing.T) {
	b := realBackend()
	c := &lostReplyClient{Client: registry.NewPoolClient(b.pool(t))}
	r := newRegClient(t, c, registry.WithLogger(slogFor(&logRecorder{})))
	l := obtain(t, r, "k")
	mustNil(t, l.LockFor(bg(t), time.Minute))
	defer func() { _ = l.UnlockContext(context.Background()) }()
	c.drop.Store(true)
	if err := r.RenewLockFor(bg(t), "k", time.Second); err == nil {
		t.Fatal("RenewLockFor with a lost reply returned nil")
	}
	recvWithin(t, l.Lost(), 2*time.Second, "Lost after a shortening renewal whose reply was lost")
}

// lostReplyClient loses the reply of one renewal after it ran.
type lostReplyClient struct {
	registry.Client
	drop atomic.Bool
}

func (c *lostReplyClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == "renew" && c.drop.Swap(false) {
		return nil, context.DeadlineExceeded
	}
	return v, err
}
