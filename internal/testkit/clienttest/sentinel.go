package clienttest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// failover cuts both replicas off the master's writes (their links drop
// what the master sends) while holder takes the locks on keys, then kills
// the master, so that the sentinels promote a replica that never received
// those writes. A second
// registry then takes the same keys. It returns how many keys holder took
// and how many of those the second registry was granted while holder still
// held them: double grants.
func failover(t *testing.T, a Adapter, opts ...registry.Option) (taken, doubles int, took time.Duration) {
	s := redistest.StartSentinelSet(t)
	pfx := prefix(t)
	holder := NewRegistry(t, a.sentinel(t, s.SentinelAddrs()), pfx, append(opts, registry.WithExpireAfter(30*time.Second))...)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}

	// Load through the failover: a third registry keeps taking other keys.
	// Their TTL is short: a release that the failover lost brings a lock
	// back on the new master until its TTL runs out.
	loadReg := NewRegistry(t, a.sentinel(t, s.SentinelAddrs()), pfx, append(opts, registry.WithExpireAfter(2*time.Second), registry.WithAutoRenew())...)
	var loadAcq, loadErr, lostLoad atomic.Int64
	loadCtx, stopLoad := context.WithCancel(context.Background())
	work := redistest.StartLoad(t, 2, func(g int) {
		// A call may span the whole failover, which the test allows up to
		// 90 s (promotion, then load resuming): a shorter bound turns a slow
		// election (a sentinel that retries it after failover-timeout) into
		// a load failure.
		ctx, cancel := context.WithTimeout(loadCtx, 100*time.Second)
		defer cancel()
		err := loadReg.ExecuteLocked(ctx, fmt.Sprintf("load-%d", g), func(context.Context) error { return nil })
		switch {
		case errors.Is(err, registry.ErrLockLost), errors.Is(err, registry.ErrReleaseFailed):
			// A hold taken while the links were cut, or a release sent
			// while no master was up (its key expires by its TTL).
			lostLoad.Add(1)
		case err != nil:
			t.Log("load:", err)
			loadErr.Add(1)
		default:
			loadAcq.Add(1)
		}
	})
	defer work.Halt()
	defer stopLoad() // before Halt: a call still waiting ends now
	redistest.WaitFor(t, 10*time.Second, "load", func() bool { return loadAcq.Load() > 10 })

	for _, link := range s.Links {
		link.Freeze()
	}
	var held []*registry.RedisLock
	for _, k := range keys {
		l, err := holder.Obtain(k)
		redistest.MustNil(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = l.LockContext(ctx)
		cancel()
		switch {
		case err == nil:
			held = append(held, l)
		case !errors.Is(err, registry.ErrReplicaAck):
			t.Fatalf("LockContext(%q) = %v; want nil or ErrReplicaAck", k, err)
		}
	}
	old := s.Master.Addr
	if m := s.CurrentMaster(); m != old {
		t.Fatalf("the sentinels failed over to %s before the master was killed", m)
	}
	killed := time.Now()
	s.Master.Stop()
	for _, link := range s.Links {
		link.Close()
	}
	redistest.WaitFor(t, 60*time.Second, "a replica promoted", func() bool { m := s.CurrentMaster(); return m != "" && m != old })
	before := loadAcq.Load()
	redistest.WaitFor(t, 30*time.Second, "load to resume on the new master", func() bool { return loadAcq.Load() > before+10 })
	took = time.Since(killed)

	other := NewRegistry(t, a.sentinel(t, s.SentinelAddrs()), pfx, opts...)
	for _, l := range held {
		o, err := other.Obtain(l.Key()[len(pfx)+1:])
		redistest.MustNil(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = o.LockContext(ctx)
		cancel()
		if err != nil {
			t.Logf("%s: not granted again: %v", l.Key(), err)
			continue
		}
		select {
		case <-l.Lost():
		default:
			doubles++ // the old holder still holds it, by its own clock
		}
		o.Unlock()
	}
	// The old holders learn of the loss at their next renewal.
	for _, l := range held {
		redistest.MustIs(t, holder.RenewLock(redistest.CtxFor(t, 5*time.Second), l.Key()[len(pfx)+1:]), registry.ErrLockLost)
		select {
		case <-l.Lost():
		default:
			t.Fatalf("%s: renewal found the key gone but Lost() is open", l.Key())
		}
		_ = l.UnlockContext(context.Background())
	}
	if loadErr.Load() != 0 {
		t.Fatalf("%d load calls failed across the failover", loadErr.Load())
	}
	t.Logf("load: %d acquisitions, %d found their lock lost or could not release it", loadAcq.Load(), lostLoad.Load())
	return len(held), doubles, took
}

// SentinelFailover: a Sentinel failover through the adapter's client: lockyard follows
// the new master; a master lost before replicating grants its locks a
// second time, unless WithReplicaAck refused them in the first place.
func SentinelFailover(t *testing.T, a Adapter) {
	t.Run("without-ack", func(t *testing.T) {
		taken, doubles, took := failover(t, a)
		t.Logf("FIGURE sentinel failover without WithReplicaAck: %d of 8 locks granted while the replicas were cut off, %d granted again after the failover (%v from kill to load resumed)", taken, doubles, took.Round(time.Millisecond))
		if taken != 8 || doubles != 8 {
			t.Fatalf("taken %d, double grants %d; want 8 and 8 (the hole WithReplicaAck closes)", taken, doubles)
		}
	})
	t.Run("with-ack", func(t *testing.T) {
		taken, doubles, took := failover(t, a, registry.WithReplicaAck(1, 50*time.Millisecond))
		t.Logf("FIGURE sentinel failover with WithReplicaAck(1, 50ms): %d of 8 locks granted while the replicas were cut off, %d double grants (%v from kill to load resumed)", taken, doubles, took.Round(time.Millisecond))
		if taken != 0 || doubles != 0 {
			t.Fatalf("taken %d, double grants %d; want 0 and 0", taken, doubles)
		}
	})
}
