package chaos

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 6: CLIENT KILL of normal and of pub/sub connections while two
// PubSubLock registries hand a key back and forth: they reconnect and
// resubscribe, acquisitions go on after every kill, nobody overlaps, and
// wake-ups work again after the last kill.
func TestClientKill(t *testing.T) {
	const (
		idle  = 2 * time.Second // wake-ups, not polls, explain fast hand-overs
		kills = 8
	)
	srv := startServer(t)
	var regs []*registry.Registry
	for range 2 {
		regs = append(regs, newRegistry(t, newPool(srv.Addr), "chaos6", registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(idle), registry.WithExpireAfter(time.Second), registry.WithCommandTimeout(500*time.Millisecond)))
	}
	var (
		acq, lockErrs, unlockErrs atomic.Int64
		inside                    atomic.Int32
		overlap                   atomic.Bool
		stop                      = make(chan struct{})
		wg                        sync.WaitGroup
	)
	for i := range 8 {
		l, err := regs[i%2].Obtain("k")
		mustNil(t, err)
		repeat(&wg, stop, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := l.LockContext(ctx)
			cancel()
			if err != nil {
				lockErrs.Add(1)
				return
			}
			if inside.Add(1) > 1 {
				overlap.Store(true)
			}
			time.Sleep(time.Millisecond) // the critical section
			inside.Add(-1)
			acq.Add(1)
			if err := l.UnlockContext(context.Background()); err != nil {
				if unlockErrs.Add(1) == 1 {
					t.Logf("first unlock error: %v", err)
				}
			}
		})
	}
	var after []int64 // acquisitions in the 300ms after each kill
	for i := range kills {
		typ := "normal"
		if i%2 == 1 {
			typ = "pubsub"
		}
		before := acq.Load()
		do(t, srv.Addr, "CLIENT", "KILL", "TYPE", typ)
		time.Sleep(300 * time.Millisecond) // a window in which progress is counted
		after = append(after, acq.Load()-before)
	}
	close(stop)
	wg.Wait()
	for i, n := range after {
		if n == 0 {
			t.Errorf("no acquisition in the 300ms after kill %d", i)
		}
	}
	if overlap.Load() {
		t.Error("two goroutines were inside the critical section at once")
	}
	// Wake-ups work again: a hand-over from one registry to the other
	// takes far less than the 2s poll.
	waitFor(t, 10*time.Second, "both subscribers back", func() bool { return pubsubClients(t, srv.Addr) == 2 })
	a, _ := regs[0].Obtain("k")
	b, _ := regs[1].Obtain("k")
	mustNil(t, a.LockContext(ctxFor(t, 5*time.Second)))
	got := lockAsync(ctxFor(t, 10*time.Second), b, 0)
	time.Sleep(100 * time.Millisecond) // b's first attempt fails
	released := mono()
	mustNil(t, a.UnlockContext(context.Background()))
	w := <-got
	mustNil(t, w.err)
	wake := time.Duration(w.at - released)
	if wake > idle/2 {
		t.Errorf("hand-over after the kills took %v: the wake-up was lost (poll %v)", wake, idle)
	}
	figure(t, 6, "%d CLIENT KILLs (normal and pubsub, alternating) during hand-offs between 2 PubSubLock registries x 4 goroutines: %d acquisitions, min %d in the 300ms after a kill, 0 overlaps, %d lock / %d unlock errors; resubscribed, wake-up hand-over %s afterwards (poll %v)",
		kills, acq.Load(), minOf(after), lockErrs.Load(), unlockErrs.Load(), ms(wake), idle)
}

func minOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

// Scenario 8: SCRIPT FLUSH under load, and a restart while nothing is held:
// EVALSHA falls back to EVAL and reconnects are retried; no error reaches
// the callers of ExecuteLocked.
func TestScriptFlushAndRestart(t *testing.T) {
	srv := startServer(t)
	r := newRegistry(t, newPool(srv.Addr), "chaos8", registry.WithExpireAfter(2*time.Second), registry.WithAutoRenew())
	var (
		calls, errs atomic.Int64
		gate        sync.RWMutex // writers: the restart, when nothing is held
		wg          sync.WaitGroup
		stop        = make(chan struct{})
	)
	for range 4 {
		repeat(&wg, stop, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			gate.RLock()
			err := r.ExecuteLocked(ctx, "k", func(context.Context) error { return nil })
			gate.RUnlock()
			calls.Add(1)
			if err != nil {
				errs.Add(1)
				t.Errorf("ExecuteLocked: %v", err)
			}
		})
	}
	flushes := 0
	for i := range 20 {
		time.Sleep(50 * time.Millisecond) // load between faults
		do(t, srv.Addr, "SCRIPT", "FLUSH")
		flushes++
		if i == 10 {
			gate.Lock()
			mustNil(t, srv.Restart())
			gate.Unlock()
		}
	}
	close(stop)
	wg.Wait()
	figure(t, 8, "%d SCRIPT FLUSHes and 1 restart under 4 goroutines of ExecuteLocked: %d calls, %d errors", flushes, calls.Load(), errs.Load())
}

// Scenario 9: a restart without persistence while the lock is held: the
// watchdog's renewal finds the key gone and reports the loss, the waiter
// acquires, and the old holder's release returns ErrLockLost.
func TestRestartWhileHeld(t *testing.T) {
	const ttl = 900 * time.Millisecond
	srv := startServer(t)
	rA := newRegistry(t, newPool(srv.Addr), "chaos9", registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	rB := newRegistry(t, newPool(srv.Addr), "chaos9", registry.WithLockType(registry.PubSubLock))
	a, _ := rA.Obtain("k")
	b, _ := rB.Obtain("k")
	mustNil(t, a.LockContext(ctxFor(t, 3*time.Second)))
	got := lockAsync(ctxFor(t, 10*time.Second), b, 0)
	time.Sleep(50 * time.Millisecond) // b waits
	mustNil(t, srv.Restart())
	restarted := mono()
	select {
	case <-a.Lost():
	case <-time.After(ttl):
		t.Fatal("the holder was not told of the loss within its TTL")
	}
	learned := time.Duration(mono() - restarted)
	w := <-got
	mustNil(t, w.err)
	err := a.UnlockContext(context.Background())
	if !errors.Is(err, registry.ErrLockLost) {
		t.Errorf("old holder's release: %v, want ErrLockLost", err)
	}
	if learned > ttl/3+100*time.Millisecond {
		t.Errorf("loss reported %v after the restart, want within one renewal period (%v)", learned, ttl/3)
	}
	figure(t, 9, "restart without persistence while held (TTL %v, auto-renew every %v): loss reported %s after the restart, waiter acquired as soon as the server answered (%s from the end of Restart), old holder's release returned ErrLockLost",
		ttl, ttl/3, ms(learned), ms(time.Duration(w.at-restarted)))
}
