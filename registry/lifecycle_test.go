package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Close wakes local and remote waiters with ErrClosed, later calls fail as
// documented, a holder can still release, and Close is idempotent.
func TestClose(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx), "remote")
		other.Lock() // held in Redis by another registry
		defer other.Unlock()
		r := newRegPrefix(t, b.pool(t), pfx)
		held, remote := obtain(t, r, "held"), obtain(t, r, "remote")
		held.Lock()
		localWaiter := make(chan error, 1)
		go func() { localWaiter <- held.LockContext(context.Background()) }()
		remoteWaiter := make(chan error, 1)
		go func() { remoteWaiter <- remote.LockContext(context.Background()) }()
		notWithin(t, remoteWaiter, 50*time.Millisecond, "remote waiter returning")

		select {
		case <-r.Done():
			t.Fatal("Done is closed before Close")
		default:
		}
		mustNil(t, r.Close())
		select {
		case <-r.Done():
		default:
			t.Fatal("Done is not closed after Close")
		}
		mustIs(t, recvWithin(t, localWaiter, 5*time.Second, "local waiter"), registry.ErrClosed)
		mustIs(t, recvWithin(t, remoteWaiter, 5*time.Second, "remote waiter"), registry.ErrClosed)
		mustNil(t, r.Close())

		_, err := r.Obtain("held")
		mustIs(t, err, registry.ErrClosed)
		mustIs(t, held.LockContext(bg(t)), registry.ErrClosed)
		mustIs(t, r.ExecuteLocked(bg(t), "x", func(context.Context) error { return nil }), registry.ErrClosed)
		if inGoroutine(held.TryLock) {
			t.Fatal("TryLock after Close succeeded")
		}
		panicked := inGoroutine(func() (err error) {
			defer func() { err, _ = recover().(error) }()
			remote.Lock()
			return nil
		})
		mustIs(t, panicked, registry.ErrClosed)
		if n, _ := redis.Int(b.do(t, "EXISTS", held.Key()), nil); n != 1 {
			t.Fatal("Close deleted a held key")
		}
		mustNil(t, held.UnlockContext(bg(t))) // release still works
		if n, _ := redis.Int(b.do(t, "EXISTS", held.Key()), nil); n != 0 {
			t.Fatal("Unlock after Close did not release")
		}
	})
}

func TestExecuteLocked(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "job")
		errFn := errors.New("fn failed")
		err := r.ExecuteLocked(bg(t), "job", func(ctx context.Context) error {
			if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 1 {
				t.Error("fn ran without the key held")
			}
			if inGoroutine(l.TryLock) {
				t.Error("another goroutine took the lock during fn")
			}
			return errFn
		})
		mustIs(t, err, errFn)
		if err == nil || errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("ExecuteLocked = %v, want only fn's error", err)
		}
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("key held after ExecuteLocked")
		}
		// A panic in fn releases the lock and propagates.
		p := func() (p any) {
			defer func() { p = recover() }()
			r.ExecuteLocked(bg(t), "job", func(context.Context) error { panic("boom") })
			return nil
		}()
		if p != "boom" || !inGoroutine(l.TryLock) {
			t.Fatalf("after a panic in fn: recovered %v; lock must be free", p)
		}
	})
}

// Without renewal, fn's context is cancelled with cause ErrLockLost once the
// validity ends, and the result matches ErrLockLost even though fn returns
// nil. Real time: the deadline runs on this process's clock.
func TestExecuteLockedLost(t *testing.T) {
	b := realBackend()
	const ttl = 300 * time.Millisecond
	r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl))
	start := time.Now()
	var cause error
	err := r.ExecuteLocked(bg(t), "slow", func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(10 * time.Second):
		}
		return nil
	})
	mustIs(t, cause, registry.ErrLockLost)
	mustIs(t, err, registry.ErrLockLost)
	if el := time.Since(start); el < ttl-ttl/10 || el > ttl+2*time.Second {
		t.Fatalf("loss signalled after %v with a TTL of %v", el, ttl)
	}
}

// RenewLock resets the TTL of a lock this registry holds, from any
// goroutine; ErrNotOwner when not held; ErrLockLost when the key is gone.
func TestRenewLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithExpireAfter(5*time.Second))
		mustIs(t, r.RenewLock(bg(t), "k"), registry.ErrNotOwner)
		l := obtain(t, r, "k")
		mustIs(t, r.RenewLock(bg(t), "k"), registry.ErrNotOwner)
		l.Lock()
		b.do(t, "PEXPIRE", l.Key(), 1000)
		mustNil(t, inGoroutine(func() error { return r.RenewLock(bg(t), "k") }))
		if pttl, _ := redis.Int64(b.do(t, "PTTL", l.Key()), nil); pttl <= 1000 {
			t.Fatalf("PTTL after RenewLock = %d, want about 5000", pttl)
		}
		b.do(t, "SET", l.Key(), "someone-else")
		mustIs(t, r.RenewLock(bg(t), "k"), registry.ErrLockLost)
		if v, _ := redis.String(b.do(t, "GET", l.Key()), nil); v != "someone-else" {
			t.Fatal("RenewLock touched another holder's key")
		}
		mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
		mustIs(t, r.RenewLock(bg(t), "k"), registry.ErrNotOwner)
	})
}

// Bad configuration fails in New with a clear error; New does not touch Redis.
func TestNewRejectsBadInput(t *testing.T) {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return nil, errors.New("must not dial") }}
	cases := []struct {
		pool   registry.Pool
		prefix string
		opt    registry.Option
		want   error
	}{
		{nil, "p", nil, registry.ErrInvalidConfig},
		{(*redis.Pool)(nil), "p", nil, registry.ErrInvalidConfig},
		{pool, "", nil, registry.ErrInvalidKey},
		{pool, "{p", nil, registry.ErrInvalidKey},
		{pool, string(make([]byte, registry.MaxKeyLen+1)), nil, registry.ErrInvalidKey},
		{pool, "p", registry.WithExpireAfter(0), registry.ErrInvalidConfig},
		{pool, "p", registry.WithExpireAfter(999 * time.Microsecond), registry.ErrInvalidConfig},
		{pool, "p", registry.WithExpireAfter(time.Millisecond), registry.ErrInvalidConfig},
		{pool, "p", registry.WithExpireAfter(registry.MinExpireAfter - time.Millisecond), registry.ErrInvalidConfig},
		{pool, "p", registry.WithExpireAfter(-time.Second), registry.ErrInvalidConfig},
		{pool, "p", registry.WithExpireAfter(registry.MaxDuration + 1), registry.ErrInvalidConfig},
		{pool, "p", registry.WithIdleBetweenTries(0), registry.ErrInvalidConfig},
		{pool, "p", registry.WithIdleBetweenTries(-1), registry.ErrInvalidConfig},
		{pool, "p", registry.WithCacheCapacity(0), registry.ErrInvalidConfig},
		{pool, "p", registry.WithLockType(7), registry.ErrInvalidConfig},
		{pool, "p", registry.WithLogger(nil), registry.ErrInvalidConfig},
		{pool, "p", registry.WithCommandTimeout(0), registry.ErrInvalidConfig},
		{pool, "p", nil, nil}, // nil option: see below
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var opts []registry.Option
			if c.opt != nil || c.want == nil {
				opts = append(opts, c.opt)
			}
			r, err := registry.New(c.pool, c.prefix, opts...)
			want := c.want
			if want == nil {
				want = registry.ErrInvalidConfig // the nil option
			}
			if r != nil || !errors.Is(err, want) {
				t.Fatalf("New = %v, %v; want an error matching %v", r, err, want)
			}
		})
	}
	r, err := registry.New(pool, "p", registry.WithExpireAfter(registry.MinExpireAfter), registry.WithLockType(registry.PubSubLock))
	mustNil(t, err)
	mustNil(t, r.Close())
	if pool.ActiveCount() != 0 {
		t.Fatal("New contacted Redis")
	}
}

// A lock goes through the named phases of its lifecycle: idle, acquiring
// while it waits in Redis, held, and idle again after the release or a
// failed wait; a hand-off to a local waiter leaves it held.
func TestPhases(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		l := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		phase := func(want string) {
			t.Helper()
			if got := l.Phase(); got != want {
				t.Fatalf("phase %q, want %q", got, want)
			}
		}
		phase("idle")
		other.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		waiter := make(chan error, 1)
		go func() { waiter <- l.LockContext(ctx) }()
		waitFor(t, 5*time.Second, "the waiter acquiring", func() bool { return l.Phase() == "acquiring" })
		mustIs(t, recvWithin(t, waiter, 5*time.Second, "waiter"), context.DeadlineExceeded)
		phase("idle")
		other.Unlock()

		l.Lock()
		phase("held")
		w := lockAndHold(l, func() error { return l.LockContext(bg(t)) })
		waitFor(t, 5*time.Second, "a local waiter", func() bool { return l.Waiters() == 1 })
		mustNil(t, l.UnlockContext(bg(t))) // a free pass to the waiter
		recvWithin(t, w.got, 5*time.Second, "the hand-off")
		phase("held")
		mustNil(t, w.unlock(t))
		phase("idle")
	})
}

// The shortest TTL accepted, MinExpireAfter, makes a hold that works: it
// is not lost as it begins, and it is released cleanly. (With 1ms every hold
// was lost at once. A machine stalled for 45ms can lose one, so one clean
// hold in five attempts passes.)
func TestMinExpireAfterHolds(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t), registry.WithExpireAfter(registry.MinExpireAfter), registry.WithLogger(slogFor(&logRecorder{}))), "k")
		var errs []error
		for range 5 {
			mustNil(t, l.LockContext(bg(t)))
			var lost bool
			select {
			case <-l.Lost():
				lost = true
			default:
			}
			err := l.UnlockContext(bg(t))
			if !lost && err == nil {
				return
			}
			errs = append(errs, err)
		}
		t.Fatalf("5 holds with the minimum TTL were all lost as they began: %v", errs)
	})
}

// Close ends the auto-renewed holds' loss signals at once, not a TTL later:
// Lost closes, and ExecuteLocked's fn sees a cause that matches ErrClosed
// and ErrLockLost.
func TestCloseStopsRenewedHolds(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithAutoRenew(), registry.WithExpireAfter(30*time.Second))
		l := obtain(t, r, "held")
		held := make(chan (<-chan struct{}), 1)
		go func() {
			l.Lock()
			held <- l.Lost()
		}()
		lost := recvWithin(t, held, 5*time.Second, "the lock")
		causes := make(chan error, 1)
		inFn := make(chan struct{})
		go func() {
			_ = r.ExecuteLocked(bg(t), "fn", func(ctx context.Context) error {
				close(inFn)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil
			})
		}()
		recvWithin(t, inFn, 5*time.Second, "fn to start")
		notWithin(t, lost, 100*time.Millisecond, "Lost before Close")
		mustNil(t, r.Close())
		recvWithin(t, lost, 2*time.Second, "Lost after Close")
		cause := recvWithin(t, causes, 2*time.Second, "fn's context to end after Close")
		mustIs(t, cause, registry.ErrClosed)
		mustIs(t, cause, registry.ErrLockLost)
	})
}
