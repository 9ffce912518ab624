package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockyard/lockyard/internal/testkit/redistest"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 4: the server stalls (SIGSTOP, DEBUG SLEEP) while a lock is held
// with auto-renew. A stall of half the TTL is ridden through; a stall of
// twice the TTL makes the holder declare the lock lost at its validity
// deadline, never later: at most TTL after the last renewal was sent, which
// was before the stall began.
func TestRedisStalled(t *testing.T) {
	const ttl = 1200 * time.Millisecond
	srv := startServer(t, "--enable-debug-command", "local")
	methods := map[string]func(d time.Duration) (stop func()){
		"SIGSTOP": func(d time.Duration) func() {
			mustNil(t, srv.Signal(unix.SIGSTOP))
			timer := time.AfterFunc(d, func() { _ = srv.Signal(unix.SIGCONT) })
			return func() { timer.Stop(); _ = srv.Signal(unix.SIGCONT) }
		},
		"DEBUG SLEEP": func(d time.Duration) func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = redistest.Do(srv.Addr, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds()))
			}()
			return func() { <-done }
		},
	}
	for _, name := range []string{"SIGSTOP", "DEBUG SLEEP"} {
		for _, stall := range []time.Duration{ttl / 2, 2 * ttl} {
			t.Run(fmt.Sprintf("%s/%v", name, stall), func(t *testing.T) {
				r := newRegistry(t, newPool(srv.Addr), "chaos4", registry.WithExpireAfter(ttl), registry.WithAutoRenew())
				l, err := r.Obtain(t.Name())
				mustNil(t, err)
				mustNil(t, l.LockContext(ctxFor(t, 5*time.Second)))
				time.Sleep(ttl / 2) // mid-period: at least one renewal went out
				began := mono()
				resume := methods[name](stall)
				select {
				case <-l.Lost():
					lostAt := mono()
					resume()
					if stall < ttl {
						t.Fatalf("a %v stall lost the lock", stall)
					}
					late := time.Duration(lostAt - began - int64(ttl))
					if late > 0 {
						t.Errorf("declared lost %v after began+TTL", late)
					}
					err := l.UnlockContext(context.Background())
					if !errors.Is(err, registry.ErrLockLost) {
						t.Errorf("unlock after the loss: %v, want ErrLockLost", err)
					}
					figure(t, 4, "%s for %v (TTL %v): lost declared %s after the stall began, %s before began+TTL", name, stall, ttl,
						ms(time.Duration(lostAt-began)), ms(-late))
				case <-time.After(stall + ttl):
					resume()
					if stall > ttl {
						t.Fatalf("a %v stall did not lose the lock", stall)
					}
					mustNil(t, l.UnlockContext(context.Background()))
					figure(t, 4, "%s for %v (TTL %v): ridden through, hold valid, released cleanly", name, stall, ttl)
				}
			})
		}
	}
}

// Scenario 5: CLIENT PAUSE WRITE holds back every script. Waiters' deadlines
// are honoured; the holder keeps the lock (its renewal completes after the
// pause) and nobody else is granted it meanwhile.
func TestClientPauseWrite(t *testing.T) {
	const (
		ttl      = 3 * time.Second
		pause    = 1500 * time.Millisecond
		deadline = 300 * time.Millisecond
	)
	srv := startServer(t)
	rA := newRegistry(t, newPool(srv.Addr), "chaos5", registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	rB := newRegistry(t, newPool(srv.Addr), "chaos5", registry.WithLockType(registry.PubSubLock))
	a, err := rA.Obtain("k")
	mustNil(t, err)
	b, err := rB.Obtain("k")
	mustNil(t, err)
	mustNil(t, a.LockContext(ctxFor(t, time.Second)))
	value := do(t, srv.Addr, "GET", a.Key())
	do(t, srv.Addr, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE")
	paused := mono()

	// A waiter with a short deadline returns at it.
	start := mono()
	err = b.LockContext(ctxFor(t, deadline))
	took := time.Duration(mono() - start)
	mustIs(t, err, context.DeadlineExceeded)
	if took > deadline+200*time.Millisecond {
		t.Errorf("LockContext with a %v deadline returned after %v", deadline, took)
	}
	// A waiter with a long deadline is not granted the lock while A holds.
	long := lockAsync(ctxFor(t, 20*time.Second), b, 0)
	time.Sleep(pause - time.Duration(mono()-paused) + ttl/3) // past the pause and one renewal period
	select {
	case <-a.Lost():
		t.Fatal("the holder lost the lock during a pause shorter than its TTL")
	case got := <-long:
		t.Fatalf("a waiter was granted the held lock: %v", got.err)
	default:
	}
	if v := do(t, srv.Addr, "GET", a.Key()); fmt.Sprint(v) != fmt.Sprint(value) {
		t.Fatalf("the holder's key changed to %q", v)
	}
	released := mono()
	mustNil(t, a.UnlockContext(context.Background()))
	got := <-long
	mustNil(t, got.err)
	figure(t, 5, "CLIENT PAUSE %v WRITE: a %v LockContext returned DeadlineExceeded after %s; holder kept the lock (TTL %v); waiter granted only after release (%s later), 0 double grants",
		pause, deadline, ms(took), ttl, ms(time.Duration(got.at-released)))
}
