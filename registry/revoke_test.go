package registry_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// A goroutine that holds a lock without auto-renew and never unlocks does
// not block its registry's other goroutines: once its hold's validity has
// ended, the next local waiter acquires through Redis. The stuck holder's
// late unlocks report the loss (ErrLockLost, logged by Unlock) and leave the
// new holder alone; it sees no token and a closed Lost channel meanwhile.
func TestStuckHolderRevoked(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 300 * time.Millisecond
		rec := &logRecorder{}
		r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl), registry.WithLogger(slogFor(rec)))
		l := obtain(t, r, "k")
		type seen struct {
			token     int64
			lostOpen  bool
			heldOpen  bool // the Lost channel it took while holding
			errs      []error
			unlockLog bool
		}
		holding, late, stuckDone := make(chan struct{}), make(chan struct{}), make(chan seen, 1)
		go func() {
			l.Lock()
			l.Lock() // two holds
			heldLost := l.Lost()
			close(holding)
			<-late // stuck past its validity
			var s seen
			select {
			case <-heldLost:
			default:
				s.heldOpen = true
			}
			s.token = l.Token()
			select {
			case <-l.Lost():
			default:
				s.lostOpen = true
			}
			s.errs = append(s.errs, l.UnlockContext(context.Background()))
			l.Unlock() // logged, no panic
			s.unlockLog = rec.count(slog.LevelError, "lost") > 0
			s.errs = append(s.errs, l.UnlockContext(context.Background()))
			stuckDone <- s
		}()
		<-holding
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, release, waiterDone := make(chan error, 1), make(chan struct{}), make(chan error, 1)
		go func() {
			err := l.LockContext(ctx)
			got <- err
			if err == nil {
				<-release
				waiterDone <- l.UnlockContext(context.Background())
			}
		}()
		// No wait for the key to expire: once the stuck hold's validity
		// ends, the registry deletes its key itself.
		mustNil(t, recvWithin(t, got, 5*time.Second, "the local waiter behind a stuck holder"))
		value, _ := redis.String(b.do(t, "GET", l.Key()), nil)
		if value == "" {
			t.Fatal("the waiter acquired, but the key is not set")
		}

		close(late)
		s := recvWithin(t, stuckDone, 5*time.Second, "the stuck holder's unlocks")
		if s.token != 0 || s.lostOpen || s.heldOpen {
			t.Fatalf("stuck holder after revocation: Token %d, Lost open %v, its earlier Lost open %v; want 0, closed, closed", s.token, s.lostOpen, s.heldOpen)
		}
		mustIs(t, s.errs[0], registry.ErrLockLost)
		if !s.unlockLog {
			t.Fatal("Unlock of a revoked hold logged no loss")
		}
		mustIs(t, s.errs[1], registry.ErrNotOwner)
		if now, _ := redis.String(b.do(t, "GET", l.Key()), nil); now != value {
			t.Fatalf("the stuck holder's unlocks changed the new holder's key: %q -> %q", value, now)
		}
		close(release)
		mustNil(t, recvWithin(t, waiterDone, 5*time.Second, "the new holder's release"))
		if n := r.Stats().LostLocks; n != 1 {
			t.Fatalf("LostLocks = %d, want 1", n)
		}
	})
}

// A goroutine that exited holding a lock does not block TryLock once the
// hold's validity has ended.
func TestDeadHolderTryLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 200 * time.Millisecond
		r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl))
		l := obtain(t, r, "k")
		done := make(chan struct{})
		go func() {
			l.Lock() // and exits
			close(done)
		}()
		<-done
		if inGoroutine(l.TryLock) {
			t.Fatal("TryLock took a lock held by a goroutine with a valid hold")
		}
		b.expire(t, l.Key(), ttl)
		waitFor(t, 5*time.Second, "TryLock after the dead holder's validity", func() bool {
			return inGoroutine(func() bool {
				if !l.TryLock() {
					return false
				}
				l.Unlock()
				return true
			})
		})
	})
}

// With WithAutoRenew a stuck holder's hold stays valid, and its registry's
// other goroutines wait; when a renewal finds its key gone, they get the
// lock at once, not at the end of the hold's validity.
func TestStuckHolderKeyGone(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const ttl = 3 * time.Second // a renewal every second
		r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl), registry.WithAutoRenew(), registry.WithLogger(slogFor(&logRecorder{})))
		l := obtain(t, r, "k")
		holding := make(chan struct{})
		go func() {
			l.Lock() // and never unlocks
			close(holding)
		}()
		<-holding
		got := lockInBackground(t, l)
		notWithin(t, got, 300*time.Millisecond, "the waiter behind a renewed hold")
		b.do(t, "DEL", l.Key())
		start := time.Now()
		mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter after the key vanished"))
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the waiter got the lock %v after the key vanished; the next renewal (1s) should have passed it on", d)
		}
	})
}

// A hold whose validity ended while nobody watched or queued behind it
// (no timer armed) is revoked by the first goroutine that queues: it does
// not wait for an unlock that never comes.
func TestLostHoldRevokedByNextWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithExpireAfter(100*time.Millisecond), registry.WithLogger(slogFor(&logRecorder{})))
		l := obtain(t, r, "k")
		mustNil(t, inGoroutine(func() error { return l.LockContext(bg(t)) })) // held by a goroutine that exited
		waitFor(t, 5*time.Second, "the hold's validity to end", l.HoldLost)
		mustNil(t, recvWithin(t, lockInBackground(t, l), 5*time.Second, "the waiter behind a lost hold"))
		if n := r.Stats().LostLocks; n != 1 {
			t.Fatalf("LostLocks = %d, want 1", n)
		}
	})
}

// A hold that a renewal finds gone goes through the loss once: its Lost
// channel closes, it is counted, and the watchdog stops renewing it,
// although its goroutine still holds the lock.
func TestGoneHoldNotRenewed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithExpireAfter(300*time.Millisecond), registry.WithAutoRenew(), registry.WithLogger(slogFor(&logRecorder{})))
		l := obtain(t, r, "k")
		l.Lock()
		defer func() { mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost) }()
		lost := l.Lost()
		if n := r.Renewing(); n != 1 {
			t.Fatalf("the watchdog renews %d holds, want 1", n)
		}
		b.do(t, "DEL", l.Key())
		recvWithin(t, lost, 5*time.Second, "Lost after the key vanished")
		waitFor(t, 5*time.Second, "the watchdog to drop the lost hold", func() bool { return r.Renewing() == 0 })
		if n := r.Stats().LostLocks; n != 1 {
			t.Fatalf("LostLocks = %d, want 1", n)
		}
	})
}

// stallingBatches fails the watchdog's pipelined renewals with a timeout
// while stall is set, and counts the batches it sends on otherwise.
type stallingBatches struct {
	registry.Client
	stall atomic.Bool
	sent  atomic.Int32
}

func (c *stallingBatches) EvalBatch(ctx context.Context, s *registry.Script, calls []registry.Call) []registry.Result {
	if c.stall.Load() {
		out := make([]registry.Result, len(calls))
		for i := range out {
			out[i].Err = context.DeadlineExceeded
		}
		return out
	}
	c.sent.Add(1)
	return c.Client.EvalBatch(ctx, s, calls)
}

// A hold whose renewals failed until its validity ended is lost, not
// renewed by the next batch: a renewal then would keep the key alive for a
// holder told that it lost it.
func TestLapsedHoldNotRenewed(t *testing.T) {
	c := &stallingBatches{Client: registry.NewPoolClient(realBackend().pool(t))}
	c.stall.Store(true)
	r := newRegClient(t, c, registry.WithExpireAfter(150*time.Millisecond), registry.WithAutoRenew(), registry.WithLogger(slogFor(&logRecorder{})))
	l := obtain(t, r, "k")
	l.Lock()
	defer func() { mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost) }()
	waitFor(t, 5*time.Second, "the hold's validity to end", l.HoldLost)
	c.stall.Store(false)
	waitFor(t, 5*time.Second, "the watchdog to drop the lapsed hold", func() bool { return r.Renewing() == 0 })
	if n := c.sent.Load(); n != 0 {
		t.Fatalf("%d renewal batches sent for a hold whose validity had ended", n)
	}
	if n := r.Stats().LostLocks; n != 1 {
		t.Fatalf("LostLocks = %d, want 1", n)
	}
}

// The goroutine a pass hands the lock to cannot be revoked before it takes
// the hold over: here the first waiter gives up during the pass, the second
// finds the key gone when it adjusts the TTL, obtains anew, and the third
// follows; each gets and releases the lock.
func TestSuccessorNotRevokedDuringPass(t *testing.T) {
	b := realBackend()
	c := &hookClient{Client: registry.NewPoolClient(b.pool(t)), addr: b.addr, passDelay: 300 * time.Millisecond}
	r := newRegClient(t, c, registry.WithAutoRenew(), registry.WithLogger(slogFor(&logRecorder{})))
	l := obtain(t, r, "k")
	mustNil(t, l.LockFor(bg(t), time.Second))
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	first := make(chan error, 1)
	go func() { first <- l.LockFor(ctx1, time.Minute) }()
	waitFor(t, 5*time.Second, "the first waiter", func() bool { return l.Waiters() == 1 })
	var ws []*waiter
	for i := range 2 {
		ws = append(ws, lockAndHold(l, func() error { return l.LockFor(bg(t), 2*time.Second) }))
		waitFor(t, 5*time.Second, "the next waiter", func() bool { return l.Waiters() == 2+i })
	}
	go func() {
		waitFor(t, 5*time.Second, "the pass", func() bool { return l.Phase() == "handing over" })
		c.delOnRenew.Store(true) // the pass takes 300ms
		cancel1()
	}()
	mustNil(t, l.UnlockContext(bg(t)))
	mustIs(t, recvWithin(t, first, 5*time.Second, "the first waiter"), context.Canceled)
	for i, w := range ws {
		select {
		case <-w.got:
		case err := <-w.done:
			t.Fatalf("waiter %d: %v", i+2, err)
		case <-time.After(8 * time.Second):
			t.Fatalf("waiter %d never got the lock", i+2)
		}
		mustNil(t, w.unlock(t))
	}
}
