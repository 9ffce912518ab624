package registry_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// events records what an Observer is told, by callback name.
type events struct {
	mu  sync.Mutex
	got []string
	all []registry.Event
}

func (e *events) observer() registry.Observer {
	rec := func(name string) func(registry.Event) {
		return func(ev registry.Event) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.got = append(e.got, name+" "+ev.Kind)
			e.all = append(e.all, ev)
		}
	}
	return registry.Observer{Waiting: rec("waiting"), Acquired: rec("acquired"), Released: rec("released"), Lost: rec("lost"), RenewalFailed: rec("renewalFailed")}
}

func (e *events) names() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// await waits until an event named name (e.g. "lost lock") was told, and
// returns the last one of that name.
func (e *events) await(t *testing.T, name string) registry.Event {
	t.Helper()
	var got registry.Event
	waitFor(t, 5*time.Second, "the Observer to be told "+name, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for i, n := range e.got {
			if n == name {
				got = e.all[i]
				return true
			}
		}
		return false
	})
	return got
}

// count returns how many events named name were told.
func (e *events) count(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, g := range e.got {
		if g == name {
			n++
		}
	}
	return n
}

func (e *events) last() registry.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.all[len(e.all)-1]
}

// Stats has the hold-time histogram, the gauges of holds and waits, and the
// outcomes; the Observer is told each event with its key, kind, token,
// fence and durations.
func TestStatsOutcomesAndObserver(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		var ev events
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithFencing(), registry.WithObserver(ev.observer()))
		other := newRegPrefix(t, b.pool(t), pfx)
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		if s := r.Stats(); s.Held != 1 || s.Waiting != 0 {
			t.Fatalf("holding: Held %d Waiting %d, want 1 and 0", s.Held, s.Waiting)
		}
		acq := ev.last()
		if acq.Key != l.Key() || acq.Kind != "lock" || acq.Fence != l.Token() || acq.Token == "" {
			t.Errorf("acquired event %+v", acq)
		}
		time.Sleep(20 * time.Millisecond) // a hold of at least 20ms, for the histogram
		l.Unlock()
		if e := ev.last(); e.Held < 20*time.Millisecond || e.Token != acq.Token || e.Fence != acq.Fence {
			t.Errorf("released event %+v, want the same token and Held >= 20ms", e)
		}
		s := r.Stats()
		if s.Held != 0 || s.Holds != 1 || s.HoldSum < 20*time.Millisecond || len(s.HoldCounts) != len(registry.HoldBuckets) || s.HoldCounts[len(s.HoldCounts)-1] != 1 || s.HoldCounts[1] != 0 {
			t.Fatalf("after one hold of 20ms: %+v", s)
		}

		// Another registry holds it: TryLock is not obtained, a wait gives
		// up with its context, and a waiter shows in the gauge meanwhile.
		le, err := other.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		if err := l.TryLockContext(bg(t)); !errors.Is(err, registry.ErrNotObtained) {
			t.Fatalf("TryLockContext: %v", err)
		}
		ctx, cancel := context.WithCancel(bg(t))
		got := make(chan error, 1)
		go func() { got <- l.LockContext(ctx) }()
		waitFor(t, 5*time.Second, "a waiter in the gauge", func() bool { return r.Stats().Waiting == 1 })
		cancel()
		if err := recvWithin(t, got, 5*time.Second, "the wait to end"); !errors.Is(err, context.Canceled) {
			t.Fatalf("LockContext: %v, want context.Canceled", err)
		}
		s = r.Stats()
		if s.NotObtained != 1 || s.GaveUp != 1 || s.Waiting != 0 || s.Held != 0 || s.Acquisitions != 1 {
			t.Fatalf("after a TryLock and a wait given up: %+v", s)
		}
		mustNil(t, le.Release(bg(t)))

		// A semaphore's permits count as holds too.
		sem := semaphore(t, r, "s", 2)
		p, err := sem.Acquire(bg(t), 0)
		mustNil(t, err)
		if s := r.Stats(); s.Held != 1 {
			t.Fatalf("a permit held: Held %d", s.Held)
		}
		mustNil(t, p.Release(bg(t)))
		// And a read-write lock's leases, the read ones sharing one hold.
		rw := rwlock(t, r, "rw")
		r1, err := rw.AcquireRead(bg(t), 0)
		mustNil(t, err)
		r2, err := rw.TryAcquireRead(bg(t), 0)
		mustNil(t, err)
		if s := r.Stats(); s.Held != 2 {
			t.Fatalf("two read leases held: Held %d", s.Held)
		}
		mustNil(t, r1.Release(bg(t)))
		mustNil(t, r2.Release(bg(t)))
		want := []string{"waiting lock", "acquired lock", "released lock", "waiting lock", "waiting semaphore", "acquired semaphore", "released semaphore",
			"waiting rwlock", "acquired rwlock", "acquired rwlock", "released rwlock", "released rwlock"}
		if got := ev.names(); !equalStrings(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if s := r.Stats(); s.Held != 0 || s.Holds != 4 {
			t.Errorf("after the leases' release: Held %d, Holds %d; want 0, 4", s.Held, s.Holds)
		}
	})
}

// A lost hold is told to the Observer once, as Stats counts it: found by
// a renewal (told once however often it is found), or at the release.
func TestObserverLost(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		var ev events
		r := newReg(t, b.pool(t), registry.WithObserver(ev.observer()), registry.WithLogger(discardLogger))
		le, err := r.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		b.do(t, "DEL", le.Key()) // behind its back
		for range 2 {
			if err := le.Renew(bg(t), 0); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("Renew of a deleted key: %v", err)
			}
		}
		if e := ev.await(t, "lost lock"); e.Key != le.Key() || e.Token == "" {
			t.Errorf("lost event %+v", e)
		}
		_ = le.Release(bg(t))

		// Found at the release: the key was deleted, and nothing renewed it.
		le, err = r.Acquire(bg(t), "k2", 0)
		mustNil(t, err)
		b.do(t, "DEL", le.Key())
		if err := le.Release(bg(t)); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Release of a deleted key: %v", err)
		}
		waitFor(t, 5*time.Second, "two lost events", func() bool { return ev.count("lost lock") == 2 })
		if s := r.Stats(); s.LostLocks != 2 || s.Held != 0 || ev.count("lost lock") != 2 {
			t.Errorf("%+v and %d lost events, want 2 of each and nothing held", s, ev.count("lost lock"))
		}
	})
}

// A renewal that fails (here with a timeout) is told to the Observer with
// its error, and counted; the hold stays valid.
func TestObserverRenewalFailed(t *testing.T) {
	b := realBackend()
	var ev events
	fc := &faultyClient{Client: registry.NewPoolClient(b.pool(t)), script: "renew", err: context.DeadlineExceeded, n: 1}
	r, err := registry.NewWithClient(fc, prefix(t), registry.WithObserver(ev.observer()), registry.WithLogger(discardLogger))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	le, err := r.Acquire(bg(t), "k", 0)
	mustNil(t, err)
	if err := le.Renew(bg(t), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Renew: %v, want the injected timeout", err)
	}
	if e := ev.await(t, "renewalFailed lock"); !errors.Is(e.Err, context.DeadlineExceeded) || e.Key != le.Key() || e.Token == "" {
		t.Errorf("renewalFailed event %+v, want the error", e)
	}
	mustNil(t, le.Renew(bg(t), 0))
	mustNil(t, le.Release(bg(t)))
	if s := r.Stats(); s.RenewalsFailed != 1 || s.Renewals != 1 || s.LostLocks != 0 || s.Holds != 1 {
		t.Errorf("%+v, want one failed renewal, one renewal, no loss", s)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// An Observer may call back into the registry: its Lost, found by the
// watchdog with the hold's locks held, releases the lease without a
// deadlock, and the watchdog goes on renewing another lease.
func TestObserverCallsBack(t *testing.T) {
	b := realBackend()
	var (
		mu    sync.Mutex
		lease *registry.Lease
	)
	released := make(chan error, 1)
	obs := registry.Observer{Lost: func(registry.Event) {
		mu.Lock()
		le := lease
		mu.Unlock()
		released <- le.Release(context.Background())
	}}
	r := newReg(t, b.pool(t), registry.WithObserver(obs), registry.WithAutoRenew(), registry.WithExpireAfter(time.Second), registry.WithLogger(discardLogger))
	le, err := r.Acquire(bg(t), "k", 0)
	mustNil(t, err)
	other, err := r.Acquire(bg(t), "other", 0)
	mustNil(t, err)
	mu.Lock()
	lease = le
	mu.Unlock()
	b.do(t, "DEL", le.Key())
	if err := recvWithin(t, released, 5*time.Second, "the Observer's Release"); !errors.Is(err, registry.ErrLockLost) {
		t.Fatalf("Release from Lost: %v, want ErrLockLost", err)
	}
	until := time.Now().Add(1500 * time.Millisecond) // past the TTL: only renewals keep the other lease
	waitFor(t, 5*time.Second, "one and a half TTLs", func() bool { return time.Now().After(until) })
	select {
	case <-other.Lost():
		t.Fatal("the other lease was lost: the watchdog stopped")
	default:
	}
	mustNil(t, other.Release(bg(t)))
}

// A release that fails in Redis is counted in ReleaseFailed (an
// uncontended lease's: drop.lua).
func TestStatsReleaseFailed(t *testing.T) {
	b := realBackend()
	fc := &faultyClient{Client: registry.NewPoolClient(b.pool(t)), script: "drop", err: &registry.ReplyError{Err: errors.New("ERR injected")}, n: 1}
	r, err := registry.NewWithClient(fc, prefix(t), registry.WithLogger(discardLogger))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	le, err := r.Acquire(bg(t), "k", 0)
	mustNil(t, err)
	if err := le.Release(bg(t)); !errors.Is(err, registry.ErrReleaseFailed) {
		t.Fatalf("Release: %v, want ErrReleaseFailed", err)
	}
	if s := r.Stats(); s.ReleaseFailed != 1 || s.Held != 0 || s.Holds != 1 {
		t.Errorf("%+v, want one failed release and nothing held", s)
	}
}

// JoinObservers tells every Observer of each event, in order, skipping the
// nil fields of each: one that observes only Acquired beside one that
// observes only Waiting and Released (as the OpenTelemetry observer sets
// no Waiting) runs without a nil call.
func TestJoinObservers(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	note := func(s string) func(registry.Event) {
		return func(e registry.Event) {
			mu.Lock()
			got = append(got, s+" "+e.Kind)
			mu.Unlock()
		}
	}
	a := registry.Observer{Acquired: note("a.acquired")}
	b := registry.Observer{Waiting: note("b.waiting"), Acquired: note("b.acquired"), Released: note("b.released")}
	joined := registry.JoinObservers(a, b, registry.Observer{})
	if joined.Lost != nil || joined.RenewalFailed != nil {
		t.Fatal("a field that no Observer sets is not nil")
	}
	r := newReg(t, realBackend().pool(t), registry.WithObserver(joined))
	le, err := r.Acquire(bg(t), "k", 0)
	mustNil(t, err)
	mustNil(t, le.Release(bg(t)))
	mu.Lock()
	defer mu.Unlock()
	want := []string{"b.waiting lock", "a.acquired lock", "b.acquired lock", "b.released lock"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}
