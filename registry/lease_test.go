package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// acquireIn makes a new goroutine Acquire key and returns the outcome on a
// channel.
func acquireIn(ctx context.Context, r *registry.Registry, key string, ttl time.Duration) <-chan *registry.Lease {
	got := make(chan *registry.Lease, 1)
	go func() {
		le, err := r.Acquire(ctx, key, ttl)
		if err != nil {
			le = nil
		}
		got <- le
	}()
	return got
}

// A lease taken by one goroutine is released by another: the key is
// deleted in Redis, and the lease has no token and a closed Lost channel
// afterwards. A second Release returns ErrNotOwner.
func TestLeaseReleasedByAnotherGoroutine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithFencing())
		le := recvWithin(t, acquireIn(bg(t), r, "job", 0), 5*time.Second, "Acquire")
		if le == nil {
			t.Fatal("Acquire of a free key failed")
		}
		if le.Token() <= 0 || le.Key() != obtain(t, r, "job").Key() {
			t.Fatalf("lease: token %d, key %q", le.Token(), le.Key())
		}
		if p := pttl(t, b, le.Key()); p <= 0 {
			t.Fatalf("the key is not held in Redis: PTTL %d", p)
		}
		select {
		case <-le.Lost():
			t.Fatal("Lost is closed while the lease is held")
		default:
		}
		mustNil(t, inGoroutine(func() error { return le.Release(bg(t)) }))
		if p := pttl(t, b, le.Key()); p != -2 {
			t.Fatalf("PTTL %d after Release, want -2 (no key)", p)
		}
		if le.Token() != 0 {
			t.Errorf("Token %d after Release, want 0", le.Token())
		}
		recvWithin(t, le.Lost(), time.Second, "Lost after Release")
		mustIs(t, le.Release(bg(t)), registry.ErrNotOwner)
		mustIs(t, le.Renew(bg(t), 0), registry.ErrNotOwner)
	})
}

// Leases and the RedisLock of one key exclude each other and queue
// together in FIFO order; the hold passes between them locally. A
// goroutine that holds the RedisLock cannot acquire a lease of its key.
func TestLeaseAndLockShareTheQueue(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		l := obtain(t, r, "k")
		first, err := r.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		if l.TryLock() {
			t.Fatal("TryLock succeeded while a lease holds the key")
		}
		_, err = r.TryAcquire(bg(t), "k", 0)
		mustIs(t, err, registry.ErrNotObtained)

		// Queue: a goroutine's Lock, then a lease, then a Lock again.
		order := make(chan string, 3)
		locker := func(name string) *waiter {
			w := lockAndHold(l, func() error { return l.LockContext(bg(t)) })
			go func() { <-w.got; order <- name }()
			return w
		}
		w1 := locker("lock 1")
		waitFor(t, 5*time.Second, "lock 1 to queue", func() bool { return l.Waiters() == 1 })
		second := acquireIn(bg(t), r, "k", 0)
		waitFor(t, 5*time.Second, "the lease to queue", func() bool { return l.Waiters() == 2 })
		w3 := locker("lock 3")
		waitFor(t, 5*time.Second, "lock 3 to queue", func() bool { return l.Waiters() == 3 })

		mustNil(t, first.Release(bg(t)))
		if got := recvWithin(t, order, 5*time.Second, "the first waiter"); got != "lock 1" {
			t.Fatalf("%s got the lock first, want lock 1", got)
		}
		notWithin(t, second, 50*time.Millisecond, "the lease while lock 1 holds")
		mustNil(t, w1.unlock(t))
		le := recvWithin(t, second, 5*time.Second, "the queued lease")
		if le == nil {
			t.Fatal("the queued Acquire failed")
		}
		notWithin(t, order, 50*time.Millisecond, "lock 3 while the lease holds")
		mustNil(t, inGoroutine(func() error { return le.Release(bg(t)) }))
		recvWithin(t, order, 5*time.Second, "lock 3")
		// The goroutine that holds the lock cannot take a lease of it.
		done := make(chan error, 1)
		go func() {
			if err := l.LockContext(bg(t)); err != nil {
				done <- err
				return
			}
			_, err := r.Acquire(bg(t), "k", 0)
			l.Unlock()
			done <- err
		}()
		mustNil(t, w3.unlock(t))
		mustIs(t, recvWithin(t, done, 5*time.Second, "Acquire by the holder"), registry.ErrNotObtained)
	})
}

// Release may run while other goroutines Renew: Release succeeds, the
// renewals end with ErrNotOwner (never ErrLockLost), no loss is counted,
// and the key is gone. Run with -race.
func TestLeaseReleaseDuringRenew(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		for i := range 20 {
			le, err := r.Acquire(bg(t), "k", time.Second)
			mustNil(t, err)
			renewErrs := make(chan error, 2)
			for range 2 {
				go func() {
					for {
						if err := le.Renew(context.Background(), 0); err != nil {
							renewErrs <- err
							return
						}
					}
				}()
			}
			mustNil(t, le.Release(bg(t)))
			for range 2 {
				err := recvWithin(t, renewErrs, 5*time.Second, "the renewals to end")
				if !errors.Is(err, registry.ErrNotOwner) || errors.Is(err, registry.ErrLockLost) {
					t.Fatalf("round %d: Renew after Release = %v, want ErrNotOwner only", i, err)
				}
			}
			if p := pttl(t, b, le.Key()); p != -2 {
				t.Fatalf("round %d: PTTL %d after Release", i, p)
			}
		}
		if s := r.Stats(); s.LostLocks != 0 {
			t.Fatalf("LostLocks = %d, want 0", s.LostLocks)
		}
	})
}

// Renew with a ttl sets the lease's TTL from then on; ttl <= 0 renews to
// the lease's own. Bad TTLs and keys are refused with clear errors.
func TestLeaseRenewAndBadInput(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t))
		le, err := r.TryAcquire(bg(t), "k", 2*time.Second)
		mustNil(t, err)
		if p := pttl(t, b, le.Key()); p <= 1000 || p > 2000 {
			t.Fatalf("TryAcquire(2s): PTTL %d", p)
		}
		mustNil(t, le.Renew(bg(t), 30*time.Second))
		mustNil(t, le.Renew(bg(t), -1))
		if p := pttl(t, b, le.Key()); p <= 29000 {
			t.Fatalf("Renew(30s) then Renew(-1): PTTL %d, want about 30000", p)
		}
		mustIs(t, le.Renew(bg(t), time.Millisecond), registry.ErrInvalidConfig)
		mustNil(t, le.Release(bg(t)))

		_, err = r.Acquire(bg(t), "k", 10*time.Millisecond)
		mustIs(t, err, registry.ErrInvalidConfig)
		_, err = r.TryAcquire(bg(t), "", 0)
		mustIs(t, err, registry.ErrInvalidKey)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = r.TryAcquire(ctx, "k", 0)
		mustIs(t, err, context.Canceled)
		mustNil(t, r.Close())
		_, err = r.Acquire(bg(t), "k", 0)
		mustIs(t, err, registry.ErrClosed)
		_, err = r.TryAcquire(bg(t), "k", 0)
		mustIs(t, err, registry.ErrClosed)
	})
}

// With WithAutoRenew the watchdog renews a lease past many TTLs; Close
// stops that and closes its Lost channel.
func TestLeaseAutoRenewed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 150 * time.Millisecond
		r := newReg(t, b.pool(t), registry.WithAutoRenew())
		le, err := r.Acquire(bg(t), "k", ttl)
		mustNil(t, err)
		notWithin(t, le.Lost(), 5*ttl, "Lost of an auto-renewed lease")
		if p := pttl(t, b, le.Key()); p <= 0 {
			t.Fatalf("the key is gone after 5 TTLs: PTTL %d", p)
		}
		if s := r.Stats(); s.Renewals < 3 {
			t.Fatalf("%d renewals over 5 TTLs", s.Renewals)
		}
		lost := le.Lost()
		mustNil(t, r.Close())
		recvWithin(t, lost, time.Second, "Lost after Close")
		mustNil(t, le.Release(bg(t)))
	})
}

// A lease that nobody renews or releases is lost at the end of its
// validity; a waiting Acquire then gets the key, and the old lease's
// Release and Renew report the loss.
func TestLeaseLostPassedOn(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 200 * time.Millisecond
		r := newReg(t, b.pool(t), registry.WithFencing())
		old, err := r.Acquire(bg(t), "k", ttl)
		mustNil(t, err)
		lost := old.Lost()
		next := recvWithin(t, acquireIn(bg(t), r, "k", 0), 5*time.Second, "the next Acquire")
		if next == nil {
			t.Fatal("the next Acquire failed")
		}
		recvWithin(t, lost, time.Second, "the old lease's Lost")
		if old.Token() != 0 || next.Token() <= 0 {
			t.Fatalf("tokens: old %d, next %d", old.Token(), next.Token())
		}
		mustIs(t, old.Renew(bg(t), 0), registry.ErrLockLost)
		mustIs(t, old.Release(bg(t)), registry.ErrLockLost)
		if p := pttl(t, b, next.Key()); p <= 0 {
			t.Fatalf("the old lease's Release touched the new holder's key: PTTL %d", p)
		}
		mustNil(t, next.Release(bg(t)))
	})
}

// ReleaseAfter ends the lease but leaves the key in Redis for d: nobody,
// here or elsewhere, gets it before it expires; then a waiting Lock of the
// same registry does.
func TestLeaseReleaseAfter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const d = 300 * time.Millisecond
		p := prefix(t)
		r := newRegPrefix(t, b.pool(t), p)
		other := newRegPrefix(t, b.pool(t), p)
		le, err := r.Acquire(bg(t), "k", 30*time.Second)
		mustNil(t, err)
		l := obtain(t, r, "k")
		w := lockAndHold(l, func() error { return l.LockContext(bg(t)) })
		waitFor(t, 5*time.Second, "the Lock to queue", func() bool { return l.Waiters() == 1 })
		start := time.Now()
		mustNil(t, le.ReleaseAfter(bg(t), d))
		if p := pttl(t, b, le.Key()); p <= 0 || p > d.Milliseconds() {
			t.Fatalf("PTTL %d ms after ReleaseAfter(%v)", p, d)
		}
		_, err = other.TryAcquire(bg(t), "k", 0)
		mustIs(t, err, registry.ErrNotObtained)
		notWithin(t, w.got, d/3, "the queued Lock before the key expires")
		if b.mr != nil {
			b.mr.FastForward(d) // on the real server the key expires by itself
		}
		recvWithin(t, w.got, 5*time.Second, "the queued Lock")
		if waited := time.Since(start); b.mr == nil && waited < d-d/10 {
			t.Fatalf("the queued Lock got the key after %v, before it expired (%v)", waited, d)
		}
		mustNil(t, w.unlock(t))
		mustIs(t, le.ReleaseAfter(bg(t), d), registry.ErrNotOwner)
		mustIs(t, le.Release(bg(t)), registry.ErrNotOwner)
	})
}

// While a lease holds the key, the RedisLock of that key is held by no
// goroutine: its Token is 0 and its Lost channel closed, as documented for
// a lock that is not held. Once a goroutine holds the lock, any goroutine
// that works for it reads its token, as before.
func TestLeaseIsNotTheLocksHold(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithFencing())
		l := obtain(t, r, "k")
		le, err := r.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		leaseTok := le.Token()
		if leaseTok <= 0 {
			t.Fatalf("lease token %d", leaseTok)
		}
		if tok := l.Token(); tok != 0 {
			t.Errorf("RedisLock.Token %d while a lease holds the key, want 0", tok)
		}
		select {
		case <-l.Lost():
		default:
			t.Error("RedisLock.Lost is open while a lease holds the key")
		}
		mustNil(t, le.Release(bg(t)))

		l.Lock()
		defer l.Unlock()
		tok := l.Token()
		if tok <= leaseTok {
			t.Fatalf("Token %d while held, after the lease's %d", tok, leaseTok)
		}
		if got := inGoroutine(l.Token); got != tok {
			t.Errorf("Token %d from a goroutine working for the holder, want %d", got, tok)
		}
		select {
		case <-inGoroutine(l.Lost):
			t.Error("Lost closed for a goroutine working for the holder")
		default:
		}
	})
}
