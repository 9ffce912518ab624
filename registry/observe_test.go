package registry_test

import (
	"context"
	"errors"
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
		want := []string{"waiting lock", "acquired lock", "released lock", "waiting lock", "waiting semaphore", "acquired semaphore", "released semaphore"}
		if got := ev.names(); !equalStrings(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
		if s := r.Stats(); s.Held != 0 || s.Holds != 2 {
			t.Errorf("after the permit's release: Held %d, Holds %d; want 0, 2", s.Held, s.Holds)
		}
	})
}

// A lost hold is told to the Observer and counted; a failed renewal too.
func TestObserverLostAndRenewalFailed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		var ev events
		r := newReg(t, b.pool(t), registry.WithObserver(ev.observer()), registry.WithLogger(discardLogger))
		le, err := r.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		b.do(t, "DEL", le.Key()) // behind its back
		if err := le.Renew(bg(t), 0); !errors.Is(err, registry.ErrLockLost) {
			t.Fatalf("Renew of a deleted key: %v", err)
		}
		if e := ev.last(); e.Kind != "lock" || e.Key != le.Key() || ev.names()[len(ev.names())-1] != "lost lock" {
			t.Errorf("events %v, last %+v; want lost", ev.names(), e)
		}
		_ = le.Release(bg(t))
		if s := r.Stats(); s.LostLocks != 1 || s.Held != 0 {
			t.Errorf("%+v, want one lost and nothing held", s)
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
	if e := ev.last(); !errors.Is(e.Err, context.DeadlineExceeded) || e.Key != le.Key() || e.Token == "" {
		t.Errorf("last event %+v (of %v), want renewalFailed with the error", e, ev.names())
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
