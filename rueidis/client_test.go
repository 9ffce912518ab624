package rueidislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/redistest"
	"github.com/lockyard/lockyard/registry"
)

// The registry behaves on rueidis as on redigo: exclusion between
// registries, fencing, a waiter woken by pub/sub, and Close ending the
// subscription at once.
func TestSingleNode(t *testing.T) {
	c := newSingle(t)
	pfx := prefix(t)
	opts := []registry.Option{registry.WithFencing(), registry.WithLockType(registry.PubSubLock),
		registry.WithIdleBetweenTries(10 * time.Second)}
	r1, r2 := newRegistry(t, c, pfx, opts...), newRegistry(t, c, pfx, opts...)
	l1, err := r1.Obtain("k")
	mustNil(t, err)
	l2, err := r2.Obtain("k")
	mustNil(t, err)
	mustNil(t, l1.LockContext(ctxFor(t, 5*time.Second)))
	if l1.Token() <= 0 {
		t.Fatalf("token %d, want a fencing token", l1.Token())
	}
	if l2.TryLock() {
		t.Fatal("a second registry took a held lock")
	}
	got := make(chan time.Time, 1)
	go func() {
		if l2.LockContext(ctxFor(t, 5*time.Second)) == nil {
			got <- time.Now()
			l2.Unlock()
		}
		close(got)
	}()
	waitFor(t, 5*time.Second, "the wait marker", func() bool {
		return exists(c, "{"+l1.Key()+"}:wait")
	})
	released := time.Now()
	mustNil(t, l1.UnlockContext(ctxFor(t, 5*time.Second)))
	at, ok := <-got
	if !ok {
		t.Fatal("the waiter did not get the lock")
	}
	// The waiter polls every 10s: only the release message wakes it sooner.
	if d := at.Sub(released); d > 2*time.Second {
		t.Fatalf("the waiter took the lock %v after the release", d)
	}
}

// Renewals are pipelined through EvalBatch, and survive a script cache
// flush (NOSCRIPT, then EVAL).
func TestRenewalAndScriptFlush(t *testing.T) {
	c := newSingle(t)
	r := newRegistry(t, c, prefix(t), registry.WithExpireAfter(300*time.Millisecond), registry.WithAutoRenew())
	var locks []*registry.RedisLock
	for _, k := range []string{"a", "b", "c"} {
		l, err := r.Obtain(k)
		mustNil(t, err)
		mustNil(t, l.LockContext(ctxFor(t, 5*time.Second)))
		locks = append(locks, l)
	}
	mustNil(t, c.Do(context.Background(), c.B().ScriptFlush().Build()).Error())
	// Three TTLs: only renewals keep the keys.
	deadline := time.Now().Add(900 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, l := range locks {
			select {
			case <-l.Lost():
				t.Fatalf("%s lost while renewed", l.Key())
			default:
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a deadline loop
	}
	for _, l := range locks {
		mustNil(t, l.UnlockContext(ctxFor(t, 5*time.Second)))
	}
}

// WAIT runs on the obtain's connection: with no replica the lock is
// refused and undone.
func TestReplicaAckWithoutReplica(t *testing.T) {
	c := newSingle(t)
	r := newRegistry(t, c, prefix(t), registry.WithReplicaAck(1, 50*time.Millisecond))
	l, err := r.Obtain("k")
	mustNil(t, err)
	err = l.LockContext(ctxFor(t, 300*time.Millisecond))
	mustIs(t, err, registry.ErrReplicaAck)
	// Undone at once, or, when the deadline cut the reply short, by the
	// registry's background cleanup.
	waitFor(t, 2*time.Second, "the unacknowledged lock to be undone", func() bool {
		return !exists(c, l.Key())
	})
}

// Many goroutines of several registries on a few keys: never two holders.
func TestContention(t *testing.T) {
	c := newSingle(t)
	pfx := prefix(t)
	var iv redistest.Intervals
	var wg sync.WaitGroup
	for i := range 3 {
		r := newRegistry(t, c, pfx, registry.WithLockType(registry.LockType(i%2)), registry.WithIdleBetweenTries(5*time.Millisecond))
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := []string{"x", "y"}[g%2]
				for range 50 {
					err := r.ExecuteLocked(ctxFor(t, 10*time.Second), key, func(context.Context) error {
						from := time.Now()
						time.Sleep(100 * time.Microsecond) // the critical section's work
						iv.Add(key, from, time.Now())
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if n := iv.Overlaps(); n != 0 {
		t.Fatalf("%d overlapping holds", n)
	}
}
