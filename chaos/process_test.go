package chaos

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 2: a holder process is SIGKILLed; a waiter in another process
// gets the lock within the TTL plus one poll interval of the kill.
func TestHolderKilled(t *testing.T) {
	const (
		ttl  = time.Second
		idle = 100 * time.Millisecond
		reps = 3
	)
	srv := startServer(t)
	for _, c := range []struct {
		lt    registry.LockType
		lease bool
	}{{registry.SpinLock, false}, {registry.PubSubLock, false}, {registry.PubSubLock, true}} {
		what := c.lt.String()
		if c.lease {
			what += ", lease holder"
		}
		lt := c.lt
		t.Run(what, func(t *testing.T) {
			var lat []time.Duration
			for i := range reps {
				key := fmt.Sprintf("k%d", i)
				holder := spawn(t, "hold", holdArgs{Addr: srv.Addr, Prefix: "chaos2", Key: key, TTL: ttl, AutoRenew: true, Lease: c.lease})
				holder.event(t, 10*time.Second, "held")
				r := newRegistry(t, newPool(srv.Addr), "chaos2", registry.WithExpireAfter(ttl),
					registry.WithIdleBetweenTries(idle), registry.WithLockType(lt))
				l, err := r.Obtain(key)
				mustNil(t, err)
				got := lockAsync(ctxFor(t, 10*time.Second), l, 0)
				time.Sleep(ttl / 2) // let the holder renew at least once while the waiter waits
				killed := mono()
				mustNil(t, holder.cmd.Process.Kill())
				a := <-got
				mustNil(t, a.err)
				d := time.Duration(a.at - killed)
				if d > ttl+idle+50*time.Millisecond {
					t.Errorf("acquired %v after the kill, want at most TTL %v + poll %v", d, ttl, idle)
				}
				lat = append(lat, d)
			}
			figure(t, 2, "%s, TTL %v, poll %v, auto-renew: kill -> next acquire median %s, max %s over %d kills (bound TTL+poll)",
				what, ttl, idle, ms(median(lat)), ms(lat[len(lat)-1]), reps)
		})
	}
}

// Scenario 3: a holder paused (SIGSTOP) past its TTL loses the lock to a
// waiter; resumed, it learns of the loss within one renewal period, its
// fenced write is rejected, and its release returns ErrLockLost and leaves
// the new owner's key alone.
func TestHolderPaused(t *testing.T) {
	for _, lease := range []bool{false, true} {
		what := "lock holder"
		if lease {
			what = "lease holder (released by another goroutine)"
		}
		t.Run(what, func(t *testing.T) { holderPaused(t, what, lease) })
	}
}

func holderPaused(t *testing.T, what string, lease bool) {
	const ttl = 900 * time.Millisecond
	srv, res := startServer(t), startServer(t)
	holder := spawn(t, "hold", holdArgs{Addr: srv.Addr, Res: res.Addr, Prefix: "chaos3", Key: "k",
		TTL: ttl, AutoRenew: true, Fencing: true, Lease: lease})
	holder.event(t, 10*time.Second, "held")
	mustNil(t, holder.cmd.Process.Signal(unix.SIGSTOP))

	r := newRegistry(t, newPool(srv.Addr), "chaos3", registry.WithExpireAfter(10*time.Second), registry.WithFencing())
	l, err := r.Obtain("k")
	mustNil(t, err)
	mustNil(t, l.LockContext(ctxFor(t, 10*time.Second)))
	rc := newPool(res.Addr).Get()
	defer rc.Close()
	ok, err := resource{res.Addr}.enter(rc, "k", l.Token())
	mustNil(t, err)
	if !ok {
		t.Fatal("the new owner's fenced write was rejected")
	}
	value := do(t, srv.Addr, "GET", l.Key())

	resumed := mono()
	mustNil(t, holder.cmd.Process.Signal(unix.SIGCONT))
	lost := holder.event(t, 5*time.Second, "lost")
	learned := time.Duration(int64(lost["at"].(float64)) - resumed)
	if learned > ttl/3 {
		t.Errorf("the resumed holder learned of the loss %v after SIGCONT, want within one renewal period (%v)", learned, ttl/3)
	}
	if w := holder.event(t, 5*time.Second, "write"); w["accepted"] != false {
		t.Error("the resumed holder's fenced write was accepted")
	}
	if u := holder.event(t, 5*time.Second, "unlock"); u["lost"] != true {
		t.Errorf("the resumed holder's unlock returned %v, want ErrLockLost", u["err"])
	}
	mustNil(t, holder.wait(t, 10*time.Second))
	if v := do(t, srv.Addr, "GET", l.Key()); fmt.Sprint(v) != fmt.Sprint(value) {
		t.Fatalf("the new owner's key changed to %q", v)
	}
	mustNil(t, l.UnlockContext(ctxFor(t, time.Second)))
	_, rejected := resource{res.Addr}.stats(t, "k")
	figure(t, 3, "%s SIGSTOPped past its TTL (%v): waiter won; resumed holder learned of the loss %s after SIGCONT (bound %v), its fenced write rejected (%d), its release returned ErrLockLost and left the new owner's key",
		what, ttl, ms(learned), ttl/3, rejected)
}
