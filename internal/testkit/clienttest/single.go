package clienttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// SingleNode: the registry behaves on the adapter as on redigo: exclusion between
// registries, fencing, a waiter woken by pub/sub, and Close ending the
// subscription at once.
func SingleNode(t *testing.T, a Adapter, addr string) {
	rc := a.single(t, addr)
	pfx := prefix(t)
	opts := []registry.Option{registry.WithFencing(), registry.WithLockType(registry.PubSubLock),
		registry.WithIdleBetweenTries(10 * time.Second)}
	r1, r2 := NewRegistry(t, rc, pfx, opts...), NewRegistry(t, rc, pfx, opts...)
	l1, err := r1.Obtain("k")
	redistest.MustNil(t, err)
	l2, err := r2.Obtain("k")
	redistest.MustNil(t, err)
	redistest.MustNil(t, l1.LockContext(redistest.CtxFor(t, 5*time.Second)))
	if l1.Token() <= 0 {
		t.Fatalf("token %d, want a fencing token", l1.Token())
	}
	if l2.TryLock() {
		t.Fatal("a second registry took a held lock")
	}
	got := lockAt(t, l2, 5*time.Second)
	redistest.WaitFor(t, 5*time.Second, "the waiter in the wait queue", func() bool {
		n, _ := redis.Int(redistest.Do(addr, "EXISTS", wire.Layout{}.QueueKey(l1.Key())))
		return n == 1
	})
	released := time.Now()
	redistest.MustNil(t, l1.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
	at, ok := <-got
	if !ok {
		t.Fatal("the waiter did not get the lock")
	}
	// The waiter polls every 10s: only the release message wakes it sooner.
	if d := at.Sub(released); d > 2*time.Second {
		t.Fatalf("the waiter took the lock %v after the release", d)
	}
}

// RenewalAndScriptFlush: renewals are pipelined through EvalBatch, and survive a script cache
// flush (NOSCRIPT, then EVAL).
func RenewalAndScriptFlush(t *testing.T, a Adapter, addr string) {
	r := NewRegistry(t, a.single(t, addr), prefix(t), registry.WithExpireAfter(time.Second), registry.WithAutoRenew())
	var locks []*registry.RedisLock
	for _, k := range []string{"a", "b", "c"} {
		l, err := r.Obtain(k)
		redistest.MustNil(t, err)
		redistest.MustNil(t, l.LockContext(redistest.CtxFor(t, 5*time.Second)))
		locks = append(locks, l)
	}
	_, err := redistest.Do(addr, "SCRIPT", "FLUSH")
	redistest.MustNil(t, err)
	// One and a half TTLs: only renewals keep the keys. (A TTL of 1s leaves
	// 660ms for a renewal to come late on a loaded machine.)
	deadline := time.Now().Add(1500 * time.Millisecond)
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
		redistest.MustNil(t, l.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
	}
}

// ReplicaAckWithoutReplica: WAIT runs on the obtain's connection: with no replica the lock is
// refused and undone.
func ReplicaAckWithoutReplica(t *testing.T, a Adapter, addr string) {
	r := NewRegistry(t, a.single(t, addr), prefix(t), registry.WithReplicaAck(1, 50*time.Millisecond))
	l, err := r.Obtain("k")
	redistest.MustNil(t, err)
	err = l.LockContext(redistest.CtxFor(t, time.Second)) // retried to the deadline; room for the first attempt
	redistest.MustIs(t, err, registry.ErrReplicaAck)
	// Undone at once, or, when the deadline cut the reply short, by the
	// registry's background cleanup.
	redistest.WaitFor(t, 2*time.Second, "the unacknowledged lock to be undone", func() bool {
		n, _ := redis.Int(redistest.Do(addr, "EXISTS", l.Key()))
		return n == 0
	})
}

// Contention: many goroutines of several registries on a few keys: never two holders.
func Contention(t *testing.T, a Adapter, addr string) {
	rc := a.single(t, addr)
	pfx := prefix(t)
	var iv redistest.Intervals
	var wg sync.WaitGroup
	for i := range 3 {
		r := NewRegistry(t, rc, pfx, registry.WithLockType(registry.LockType(i%2)), registry.WithIdleBetweenTries(5*time.Millisecond))
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := []string{"x", "y"}[g%2]
				for range 50 {
					err := r.ExecuteLocked(redistest.CtxFor(t, 10*time.Second), key, func(context.Context) error {
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

// SetNX: the adapter's SetNX sets a free key with its TTL and reports false for a taken one,
// as the registry's plain obtain needs (registry.SetNXClient); SetNXGet too.
func SetNX(t *testing.T, a Adapter, addr string) {
	c, ok := a.single(t, addr).(registry.SetNXClient)
	if !ok {
		t.Fatalf("the %s client has no SetNX", a.Name)
	}
	k := prefix(t) + ":k"
	set, err := c.SetNX(redistest.CtxFor(t, 5*time.Second), k, "a", 5*time.Second)
	redistest.MustNil(t, err)
	if !set {
		t.Fatal("SetNX on a free key: false")
	}
	set, err = c.SetNX(redistest.CtxFor(t, 5*time.Second), k, "b", 5*time.Second)
	redistest.MustNil(t, err)
	if set {
		t.Fatal("SetNX on a taken key: true")
	}
	v, _ := redis.String(redistest.Do(addr, "GET", k))
	p, _ := redis.Int64(redistest.Do(addr, "PTTL", k))
	if v != "a" || p <= 4000 || p > 5000 {
		t.Fatalf("after SetNX: value %q, PTTL %d ms; want a, 5s", v, p)
	}
	setNXGet(t, a, addr)
}

// setNXGet: the adapter's SetNXGet sets a free key with its TTL and says it
// was absent, and returns the value of a taken one, leaving it alone: a
// TryLock's obtain (registry.SetNXGetClient).
func setNXGet(t *testing.T, a Adapter, addr string) {
	c, ok := a.single(t, addr).(registry.SetNXGetClient)
	if !ok {
		t.Fatalf("the %s client has no SetNXGet", a.Name)
	}
	k := prefix(t) + ":g"
	old, existed, err := c.SetNXGet(redistest.CtxFor(t, 5*time.Second), k, "a", 5*time.Second)
	redistest.MustNil(t, err)
	if existed || old != "" {
		t.Fatalf("SetNXGet on a free key: %q, %v; want it set", old, existed)
	}
	old, existed, err = c.SetNXGet(redistest.CtxFor(t, 5*time.Second), k, "b", 5*time.Second)
	redistest.MustNil(t, err)
	if !existed || old != "a" {
		t.Fatalf("SetNXGet on a taken key: %q, %v; want a, true", old, existed)
	}
	v, _ := redis.String(redistest.Do(addr, "GET", k))
	p, _ := redis.Int64(redistest.Do(addr, "PTTL", k))
	if v != "a" || p <= 4000 || p > 5000 {
		t.Fatalf("after SetNXGet: value %q, PTTL %d ms; want a, 5s", v, p)
	}
}

// SubscribesByKey: a PubSubLock registry on a Client that can subscribe by
// channel (registry.ChannelSubscriber) subscribes to the release channel of
// each key its waiters wait for, the first when its subscription opens and
// the next on the live one, and no pattern; on one that cannot, to the
// pattern. Either way the releases wake the waiters (they poll every 10s).
func SubscribesByKey(t *testing.T, a Adapter, addr string) {
	rc := a.single(t, addr)
	pfx := prefix(t)
	_, byKey := rc.(registry.ChannelSubscriber)
	holder := NewRegistry(t, rc, pfx)
	r := NewRegistry(t, rc, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))
	numsub := func(lk string) int64 {
		v, err := redis.Values(redistest.Do(addr, "PUBSUB", "NUMSUB", wire.Layout{Registry: pfx}.Channel(lk)))
		if err != nil || len(v) != 2 {
			t.Fatalf("PUBSUB NUMSUB: %v %v", v, err)
		}
		n, _ := v[1].(int64)
		return n
	}
	subscribed := func(lk string) bool {
		if !byKey {
			n, _ := redis.Int(redistest.Do(addr, "PUBSUB", "NUMPAT"))
			return n == 1
		}
		return numsub(lk) == 1
	}
	var waits []<-chan time.Time
	var leases []*registry.Lease
	for _, k := range []string{"a", "b"} {
		le, err := holder.Acquire(redistest.CtxFor(t, 5*time.Second), k, 0)
		redistest.MustNil(t, err)
		leases = append(leases, le)
		l, err := r.Obtain(k)
		redistest.MustNil(t, err)
		got := lockAt(t, l, 10*time.Second)
		waits = append(waits, got)
		redistest.WaitFor(t, 5*time.Second, "the waiter on "+k+" subscribed", func() bool { return subscribed(le.Key()) })
	}
	if byKey {
		if n, _ := redis.Int(redistest.Do(addr, "PUBSUB", "NUMPAT")); n != 0 {
			t.Fatalf("%d pattern subscriptions beside the subscription by key", n)
		}
	}
	for i, le := range leases {
		released := time.Now()
		redistest.MustNil(t, le.Release(redistest.CtxFor(t, 5*time.Second)))
		at, ok := <-waits[i]
		if !ok {
			t.Fatalf("the waiter on %s did not get the lock", le.Key())
		}
		if d := at.Sub(released); d > 2*time.Second {
			t.Fatalf("the waiter on %s took the lock %v after the release", le.Key(), d)
		}
	}
	if !byKey {
		return
	}
	// A key no waiter asks for is let go: after two polls and a second,
	// here 1.2 s.
	quick := NewRegistry(t, rc, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(100*time.Millisecond))
	le, err := holder.Acquire(redistest.CtxFor(t, 5*time.Second), "c", 0)
	redistest.MustNil(t, err)
	l, err := quick.Obtain("c")
	redistest.MustNil(t, err)
	got := make(chan error, 1)
	go func() {
		err := l.LockContext(redistest.CtxFor(t, 5*time.Second))
		if err == nil {
			l.Unlock()
		}
		got <- err
	}()
	redistest.WaitFor(t, 5*time.Second, "the waiter on c subscribed", func() bool { return numsub(le.Key()) == 1 })
	redistest.MustNil(t, le.Release(redistest.CtxFor(t, 5*time.Second)))
	redistest.MustNil(t, <-got)
	redistest.WaitFor(t, 10*time.Second, "the key c let go", func() bool { return numsub(le.Key()) == 0 })
}

// lockAt locks l in a goroutine, within d, and sends when it got the lock
// (then unlocks it); the channel is closed after, or at once if it did not
// get it.
func lockAt(t *testing.T, l *registry.RedisLock, d time.Duration) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		defer close(got)
		if l.LockContext(redistest.CtxFor(t, d)) == nil {
			got <- time.Now()
			l.Unlock()
		}
	}()
	return got
}
