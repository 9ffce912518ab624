package clienttest

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// ClusterMutualExclusion: three processes, two registries each, contend for keys on every master:
// no lost update, no stale fencing token, no error.
func ClusterMutualExclusion(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	var keys []string
	for _, ks := range c.KeysPerMaster(t, 2) {
		keys = append(keys, ks...)
	}
	pfx := prefix(t)
	const procs, iter = 3, 40
	sum := spawn(t, procs, "contend", "LY_ADDRS="+strings.Join(c.Addrs, ","), "LY_PREFIX="+pfx,
		"LY_KEYS="+strings.Join(keys, ","), "LY_ITER=40")
	var total int64
	for _, k := range keys {
		n, _ := redis.Int64(c.DoKey(pfx+":cnt:{"+k+"}", "GET", pfx+":cnt:{"+k+"}"))
		total += n
	}
	t.Logf("FIGURE cluster exclusion: %d acquisitions by %d processes over %d keys on 3 masters: %d lost updates, %d stale tokens, %d errors",
		sum[0], procs, len(keys), sum[0]-total, sum[1], sum[2])
	if want := int64(procs * 8 * iter); sum[0] != want || sum[2] != 0 {
		t.Fatalf("%d acquisitions and %d errors, want %d and 0", sum[0], sum[2], want)
	}
	if total != sum[0] || sum[1] != 0 {
		t.Fatalf("counters sum to %d for %d acquisitions; %d stale tokens", total, sum[0], sum[1])
	}
}

// ClusterWakeups: a release on any master wakes a waiter in another registry, whose
// subscription is on one node: the waiters poll every 10s.
func ClusterWakeups(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	pfx := prefix(t)
	opts := []registry.Option{registry.WithHashTag(), registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	holder, waiter := NewRegistry(t, rc, pfx, opts...), NewRegistry(t, rc, pfx, opts...)
	var lat []time.Duration
	for m, ks := range c.KeysPerMaster(t, 1) {
		h, err := holder.Obtain(ks[0])
		redistest.MustNil(t, err)
		redistest.MustNil(t, h.LockContext(redistest.CtxFor(t, 5*time.Second)))
		w, err := waiter.Obtain(ks[0])
		redistest.MustNil(t, err)
		got := lockAt(t, w, 5*time.Second)
		redistest.WaitFor(t, 5*time.Second, "the waiter in the wait queue", func() bool {
			n, _ := redis.Int(c.DoKey(h.Key(), "EXISTS", wire.Layout{HashTag: true}.QueueKey(h.Key())))
			return n == 1
		})
		released := time.Now()
		redistest.MustNil(t, h.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
		at, ok := <-got
		if !ok {
			t.Fatalf("the waiter for a key on %s did not get the lock", m)
		}
		<-got // closed once its Unlock returned: no release outlives the test
		lat = append(lat, at.Sub(released))
	}
	t.Logf("FIGURE cluster wake-ups: release to acquire on 3 masters %v (median %v), with a 10s poll", lat, redistest.Median(lat))
	for _, d := range lat {
		if d > 2*time.Second {
			t.Fatalf("a waiter took %v to get a released lock: not woken", d)
		}
	}
}

// ClusterHashTagFencing: a key with braces of its own (user:{42}:cart) works in Cluster in
// both key forms, with fencing and with waiters: every key a script touches
// (fence counter, wait queue, turn) lies in the lock key's slot.
func ClusterHashTagFencing(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	for _, opts := range [][]registry.Option{{registry.WithFencing()}, {registry.WithFencing(), registry.WithHashTag()}} {
		pfx := prefix(t)
		r := NewRegistry(t, rc, pfx, append(opts, registry.WithLockType(registry.PubSubLock))...)
		l, err := r.Obtain("user:{42}:cart")
		redistest.MustNil(t, err)
		var first int64
		for i := int64(0); i < 3; i++ {
			redistest.MustNil(t, l.LockContext(redistest.CtxFor(t, 5*time.Second)))
			if i == 0 {
				first = l.Token()
			}
			if want := first + i; first <= 0 || l.Token() != want {
				t.Fatalf("token %d, want %d", l.Token(), want)
			}
			if i == 2 { // a waiter in another registry: queued, then woken by the release
				other := NewRegistry(t, rc, pfx, append(opts, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))...)
				ol, err := other.Obtain("user:{42}:cart")
				redistest.MustNil(t, err)
				got := make(chan error, 1)
				go func() {
					err := ol.LockContext(redistest.CtxFor(t, 5*time.Second))
					if err == nil {
						err = ol.UnlockContext(redistest.CtxFor(t, 5*time.Second))
					}
					got <- err
				}()
				redistest.WaitFor(t, 5*time.Second, "the waiter in the queue", func() bool {
					n, _ := redis.Int(c.DoKey(l.Key(), "EXISTS", wire.Layout{HashTag: len(opts) == 2}.QueueKey(l.Key())))
					return n == 1
				})
				redistest.MustNil(t, l.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
				redistest.MustNil(t, redistest.Next(t, got, 5*time.Second, "the waiter's turn", func(error) bool { return true }))
				continue
			}
			redistest.MustNil(t, l.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
		}
		if s1, s2 := c.KeySlot(t, l.Key()), c.KeySlot(t, wire.Layout{HashTag: len(opts) == 2}.FenceKey(l.Key())); s1 != s2 {
			t.Fatalf("lock key in slot %d, fence counter in %d", s1, s2)
		}
	}
}

// ClusterSlotMigration: a slot moves to another master while two locks in it are held (and
// renewed) and four goroutines take and release a third: the held locks
// are not lost, nobody overlaps, and no call fails.
func ClusterSlotMigration(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	pfx := prefix(t)
	// Three keys of one slot: one hash tag, three lock keys.
	r := NewRegistry(t, rc, pfx, registry.WithHashTag(), registry.WithFencing(), registry.WithAutoRenew(),
		registry.WithExpireAfter(time.Second), registry.WithIdleBetweenTries(5*time.Millisecond))
	slot := c.KeySlot(t, "mig")
	src := c.MasterOf(t, slot)
	dst := otherMaster(t, c, src)
	held := make([]*registry.RedisLock, 2)
	for i, k := range []string{"mig}a", "mig}b"} { // hash tag "mig"
		l, err := r.Obtain(k)
		redistest.MustNil(t, err)
		redistest.MustNil(t, l.LockContext(redistest.CtxFor(t, 5*time.Second)))
		held[i] = l
	}
	var (
		iv        redistest.Intervals
		acq, errs atomic.Int64
		other     = NewRegistry(t, rc, pfx, registry.WithHashTag(), registry.WithFencing(), registry.WithIdleBetweenTries(5*time.Millisecond))
	)
	work := redistest.StartLoad(t, 4, func(g int) {
		reg := []*registry.Registry{r, other}[g%2]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := reg.ExecuteLocked(ctx, "mig}c", func(context.Context) error {
			from := time.Now()
			time.Sleep(200 * time.Microsecond) // the critical section's work
			iv.Add("c", from, time.Now())
			return nil
		})
		if err != nil {
			errs.Add(1)
			t.Log(err)
			return
		}
		acq.Add(1)
	})
	redistest.WaitFor(t, 5*time.Second, "load before the migration", func() bool { return acq.Load() >= 20 })
	start := time.Now()
	steps := 0
	c.Migrate(t, slot, src, dst, func() {
		// Let the load run against each half-migrated state, for 5
		// acquisitions or 50ms: while only some of a script's keys have
		// moved, Redis answers TRYAGAIN and the lock waits.
		n, until := acq.Load(), time.Now().Add(50*time.Millisecond)
		for acq.Load() < n+5 && time.Now().Before(until) {
			time.Sleep(time.Millisecond) // poll interval of a bounded loop
		}
		steps++
	})
	took := time.Since(start)
	// The held keys now live on dst, and only renewals there keep them:
	// watch them for one and a half TTLs.
	for _, l := range held {
		if n, _ := redis.Int(redistest.Do(dst, "EXISTS", l.Key())); n != 1 {
			t.Fatalf("%s not on the new master", l.Key())
		}
	}
	until := time.Now().Add(1500 * time.Millisecond)
	redistest.WaitFor(t, 5*time.Second, "1.5 TTLs after the migration", func() bool {
		for _, l := range held {
			select {
			case <-l.Lost():
				t.Fatalf("%s lost after the migration", l.Key())
			default:
			}
		}
		return time.Now().After(until)
	})
	work.Halt()
	if m := c.MasterOf(t, slot); m != dst {
		t.Fatalf("slot %d on %s after the migration, want %s", slot, m, dst)
	}
	for _, l := range held {
		select {
		case <-l.Lost():
			t.Fatalf("%s lost during the migration", l.Key())
		default:
		}
		redistest.MustNil(t, l.UnlockContext(redistest.CtxFor(t, 5*time.Second)))
	}
	t.Logf("FIGURE cluster slot migration: slot %d moved key by key (%d steps) in %v under load; %d acquisitions, %d errors, %d overlaps, 2 held locks kept",
		slot, steps, took.Round(time.Millisecond), acq.Load(), errs.Load(), iv.Overlaps())
	if errs.Load() != 0 || iv.Overlaps() != 0 {
		t.Fatalf("%d errors, %d overlaps", errs.Load(), iv.Overlaps())
	}
}

// otherMaster returns a master of c other than src.
func otherMaster(t *testing.T, c *redistest.Cluster, src string) string {
	for _, ks := range c.KeysPerMaster(t, 1) {
		if m := c.MasterOf(t, c.KeySlot(t, ks[0])); m != src {
			return m
		}
	}
	t.Fatalf("no master other than %s", src)
	return ""
}

// ClusterReleaseMidMigration: a held lock, a fenced semaphore's permit and
// an unfenced one (given back by a plain ZREM), whose key has moved to the
// importing master while its fence counter and wait queue have not (Redis
// refuses every script on several of its keys, TRYAGAIN, until the
// migration ends), are released at once, by the key alone, with a failed
// call or two, not one per retry; the waiter of another registry takes
// each as soon as the migration ends: the key is not kept to its TTL.
func ClusterReleaseMidMigration(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	// Scripts only: on Redis 8.4+ and Valkey 9+ a lock's release is
	// otherwise a native command on one key, which needs no fallback.
	scripts := []registry.Option{registry.WithHashTag(), registry.WithFencing(), registry.WithScriptsOnly(), registry.WithExpireAfter(time.Minute)}
	// hold takes a lock or permit of key in r and returns its Redis key, its
	// release, and the wait of another registry's acquirer (which releases
	// what it gets).
	type hold func(t *testing.T, r, other *registry.Registry, key string) (rk string, release func() error, wait func() error)
	semaphore := func(t *testing.T, r, other *registry.Registry, key string) (string, func() error, func() error) {
		s, err := r.Semaphore(key, 1)
		redistest.MustNil(t, err)
		le, err := s.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
		redistest.MustNil(t, err)
		os, err := other.Semaphore(key, 1)
		redistest.MustNil(t, err)
		return s.Key(), func() error { return le.Release(redistest.CtxFor(t, 5*time.Second)) }, func() error {
			ole, err := os.Acquire(redistest.CtxFor(t, 10*time.Second), 0)
			if err != nil {
				return err
			}
			return ole.Release(redistest.CtxFor(t, 5*time.Second))
		}
	}
	for _, tc := range []struct {
		name, tag string
		opts      []registry.Option
		hold      hold
	}{
		{"lock", "half", scripts, func(t *testing.T, r, other *registry.Registry, key string) (string, func() error, func() error) {
			l, err := r.Obtain(key)
			redistest.MustNil(t, err)
			redistest.MustNil(t, l.LockContext(redistest.CtxFor(t, 5*time.Second)))
			ol, err := other.Obtain(key)
			redistest.MustNil(t, err)
			return l.Key(), func() error { return l.UnlockContext(redistest.CtxFor(t, 5*time.Second)) }, func() error {
				if err := ol.LockContext(redistest.CtxFor(t, 10*time.Second)); err != nil {
					return err
				}
				return ol.UnlockContext(redistest.CtxFor(t, 5*time.Second))
			}
		}},
		{"semaphore", "halfsem", scripts, semaphore},
		// Unfenced, uncontended until then: a plain ZREM, which a node
		// serves by ASK, then the turns' script, refused.
		{"semaphore-plain", "halfplain", []registry.Option{registry.WithHashTag(), registry.WithExpireAfter(time.Minute)}, semaphore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pfx := prefix(t)
			r := NewRegistry(t, rc, pfx, tc.opts...)
			other := NewRegistry(t, rc, pfx, append(tc.opts, registry.WithLockType(registry.PubSubLock))...)
			slot := c.KeySlot(t, tc.tag)
			src := c.MasterOf(t, slot)
			dst := otherMaster(t, c, src)
			key, release, wait := tc.hold(t, r, other, tc.tag+"}x") // hash tag tc.tag
			got := make(chan error, 1)
			go func() { got <- wait() }()
			queue := wire.Layout{HashTag: true}.QueueKey(key)
			redistest.WaitFor(t, 5*time.Second, "the waiter in the queue", func() bool {
				n, _ := redis.Int(c.DoKey(key, "EXISTS", queue))
				return n == 1
			})
			host, port, _ := strings.Cut(dst, ":")
			first, took := true, time.Duration(0)
			c.Migrate(t, slot, src, dst, func() {
				if !first {
					return
				}
				first = false
				// The key alone moves: its queue and fence counter stay.
				// Errorf, not Fatalf: the migration goes on to its end.
				if _, err := redistest.Do(src, "MIGRATE", host, port, key, 0, 5000); err != nil {
					t.Errorf("MIGRATE %s: %v", key, err)
					return
				}
				from, errs := time.Now(), r.Stats().RedisErrors
				if err := release(); err != nil {
					t.Errorf("release while the slot migrates: %v", err)
				}
				took = time.Since(from)
				// A refusal or two (the script on all keys, a redirection
				// the client did not follow), not one per retry.
				if n := r.Stats().RedisErrors - errs; n > 2 {
					t.Errorf("%d failed calls in the release, want at most 2", n)
				}
				if n, err := askingExists(dst, key); n != 0 || err != nil {
					t.Errorf("%s on %s after its release: %d, %v", key, dst, n, err)
				}
				select {
				case err := <-got:
					t.Errorf("the waiter got in while its queue was split: %v", err)
				default:
				}
			})
			moved := time.Now()
			redistest.MustNil(t, redistest.Next(t, got, 15*time.Second, "the waiter's turn after the migration", func(error) bool { return true }))
			t.Logf("FIGURE %s released in %v while its slot migrated; its waiter had it and let it go %v after the migration ended",
				tc.name, took.Round(10*time.Microsecond), time.Since(moved).Round(10*time.Microsecond))
		})
	}
}

// askingExists returns EXISTS key on addr, a master importing its slot.
func askingExists(addr, key string) (int, error) {
	conn, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(5*time.Second))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if _, err := conn.Do("ASKING"); err != nil {
		return 0, err
	}
	return redis.Int(conn.Do("EXISTS", key))
}

// ClusterSemaphore: a fenced semaphore on a key of every master, in both key
// forms and with a key that has braces of its own: every key its scripts
// touch lies in its slot (no CROSSSLOT), the permits are bounded, a waiter
// of another registry is woken by a release, and tokens increase.
func ClusterSemaphore(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	for _, hashTag := range []bool{false, true} {
		opts := []registry.Option{registry.WithFencing(), registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
		if hashTag {
			opts = append(opts, registry.WithHashTag())
		}
		pfx := prefix(t)
		r1, r2 := NewRegistry(t, rc, pfx, opts...), NewRegistry(t, rc, pfx, opts...)
		keys := []string{"user:{42}:exports"}
		for _, ks := range c.KeysPerMaster(t, 1) {
			keys = append(keys, ks[0])
		}
		for _, k := range keys {
			s1, err := r1.Semaphore(k, 2)
			redistest.MustNil(t, err)
			s2, err := r2.Semaphore(k, 2)
			redistest.MustNil(t, err)
			a1, err := s1.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
			redistest.MustNil(t, err)
			a2, err := s2.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
			redistest.MustNil(t, err)
			if _, err := s2.TryAcquire(redistest.CtxFor(t, 5*time.Second), 0); !errors.Is(err, registry.ErrNotObtained) {
				t.Fatalf("a third permit of %q: %v, want ErrNotObtained", k, err)
			}
			got := make(chan *registry.Lease, 1)
			go func() {
				le, _ := s2.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
				got <- le
			}()
			redistest.WaitFor(t, 5*time.Second, "the waiter in the queue", func() bool {
				n, _ := redis.Int(c.DoKey(s1.Key(), "EXISTS", wire.Layout{HashTag: hashTag}.QueueKey(s1.Key())))
				return n == 1
			})
			redistest.MustNil(t, a1.Release(redistest.CtxFor(t, 5*time.Second)))
			a3 := redistest.Next(t, got, 5*time.Second, "the waiter's permit", func(*registry.Lease) bool { return true })
			if a3 == nil || a3.Token() <= a2.Token() || a2.Token() <= a1.Token() {
				t.Fatalf("%q: leases %v %v %v", k, a1, a2, a3)
			}
			redistest.MustNil(t, a2.Release(redistest.CtxFor(t, 5*time.Second)))
			redistest.MustNil(t, a3.Release(redistest.CtxFor(t, 5*time.Second)))
		}
	}
}

// ClusterInspect: Inspect of a lock and of a semaphore on a key of every
// master, in both key forms and with a key that has braces of its own, by a
// registry that neither holds nor waits: the holder with its label (read
// from another slot than the key's), the waiter, the fence counter.
func ClusterInspect(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	for _, hashTag := range []bool{false, true} {
		opts := []registry.Option{registry.WithFencing(), registry.WithLockType(registry.PubSubLock)}
		if hashTag {
			opts = append(opts, registry.WithHashTag())
		}
		pfx := prefix(t)
		holder := NewRegistry(t, rc, pfx, append(opts, registry.WithLabel("holder"))...)
		waiter := NewRegistry(t, rc, pfx, append(opts, registry.WithLabel("waiter"))...)
		observer := NewRegistry(t, rc, pfx, opts...)
		keys := []string{"user:{42}:cart"}
		for _, ks := range c.KeysPerMaster(t, 1) {
			keys = append(keys, ks[0])
		}
		for _, k := range keys {
			le, err := holder.Acquire(redistest.CtxFor(t, 5*time.Second), k, 0)
			redistest.MustNil(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				if w, err := waiter.Acquire(ctx, k, 0); err == nil {
					_ = w.Release(context.Background())
				}
			}()
			var info registry.KeyInfo
			redistest.WaitFor(t, 5*time.Second, "the waiter listed", func() bool {
				info, err = observer.Inspect(redistest.CtxFor(t, 5*time.Second), k)
				redistest.MustNil(t, err)
				return len(info.Waiters) == 1
			})
			if info.Kind != "lock" || len(info.Holders) != 1 || info.Holders[0].Label != "holder" || info.Waiters[0].Label != "waiter" || info.Fence != le.Token() {
				t.Errorf("Inspect(%q): %+v, want the holder, the waiter and fence %d", k, info, le.Token())
			}
			cancel()
			<-done
			redistest.MustNil(t, le.Release(redistest.CtxFor(t, 5*time.Second)))

			s, err := holder.Semaphore(k+"-sem", 2)
			redistest.MustNil(t, err)
			p, err := s.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
			redistest.MustNil(t, err)
			info, err = observer.Inspect(redistest.CtxFor(t, 5*time.Second), k+"-sem")
			redistest.MustNil(t, err)
			if info.Kind != "semaphore" || len(info.Holders) != 1 || info.Holders[0].Label != "holder" || info.Fence != p.Token() {
				t.Errorf("Inspect(%q): %+v, want one permit of holder, fence %d", k+"-sem", info, p.Token())
			}
			redistest.MustNil(t, p.Release(redistest.CtxFor(t, 5*time.Second)))
		}
	}
}

// ClusterMultiKey: AcquireAll on keys of every master (3 slots and more)
// and on keys that share a slot by a hash tag, in both key forms: no
// CROSSSLOT reaches the caller; TryAcquireAll refused by a key of a later
// slot gives back what it took of the earlier ones; and registries that
// lock random overlapping sets, in any order, never overlap and never
// deadlock.
func ClusterMultiKey(t *testing.T, a Adapter) {
	c := redistest.SharedCluster(t)
	rc := a.cluster(t, c.Addrs)
	var spread []string
	for _, ks := range c.KeysPerMaster(t, 2) {
		spread = append(spread, ks...)
	}
	for _, hashTag := range []bool{false, true} {
		var opts []registry.Option
		if hashTag {
			opts = append(opts, registry.WithHashTag())
		}
		opts = append(opts, registry.WithLockType(registry.PubSubLock), registry.WithFencing())
		pfx := prefix(t)
		r1, r2 := NewRegistry(t, rc, pfx, opts...), NewRegistry(t, rc, pfx, opts...)
		ctx := redistest.CtxFor(t, 30*time.Second)
		tagged := []string{"acct:{7}:1", "acct:{7}:2", "acct:{7}:3"}
		le, err := r1.AcquireAll(ctx, append(slices.Clone(spread), tagged...), 0)
		redistest.MustNil(t, err)
		if n := len(le.Tokens()); n != len(spread)+3 || slices.Contains(le.Tokens(), 0) {
			t.Fatalf("tokens %v", le.Tokens())
		}
		if _, err := r2.TryAcquireAll(ctx, []string{spread[len(spread)-1]}, 0); !errors.Is(err, registry.ErrNotObtained) {
			t.Fatalf("TryAcquireAll of a held key: %v", err)
		}
		// Refused by the key of the highest slot, taken last in the global
		// order: the earlier slots' keys, taken first, are given back.
		full := le.Keys()[:len(spread)]
		redistest.MustNil(t, le.Release(ctx))
		lastAt := 0
		for i := range full {
			if c.KeySlot(t, full[i]) > c.KeySlot(t, full[lastAt]) {
				lastAt = i
			}
		}
		held, err := r2.Acquire(ctx, spread[lastAt], 0)
		redistest.MustNil(t, err)
		if _, err := r1.TryAcquireAll(ctx, spread, 0); !errors.Is(err, registry.ErrNotObtained) {
			t.Fatalf("TryAcquireAll beside a held key: %v", err)
		}
		for _, k := range slices.Delete(slices.Clone(spread), lastAt, lastAt+1) {
			redistest.WaitFor(t, 5*time.Second, "the keys taken before the refusal given back", func() bool {
				tl, err := r2.TryAcquire(ctx, k, 0)
				if err != nil {
					return false
				}
				redistest.MustNil(t, tl.Release(ctx))
				return true
			})
		}
		redistest.MustNil(t, held.Release(ctx))

		// Random overlapping sets, 3 registries x 2 goroutines.
		keys := append(slices.Clone(spread), tagged...)
		inside := make([]atomic.Int32, len(keys))
		var overlaps, done atomic.Int32
		var wg sync.WaitGroup
		for p := range 3 {
			reg := NewRegistry(t, rc, pfx, opts...)
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 15 {
						idx := rand.Perm(len(keys))[:3]
						set := make([]string, 3)
						for i, k := range idx {
							set[i] = keys[k]
						}
						le, err := reg.AcquireAll(ctx, set, 0)
						if err != nil {
							t.Errorf("registry %d: %v", p, err)
							return
						}
						for _, k := range idx {
							if inside[k].Add(1) > 1 {
								overlaps.Add(1)
							}
						}
						time.Sleep(2 * time.Millisecond)
						for _, k := range idx {
							inside[k].Add(-1)
						}
						if err := le.Release(ctx); err != nil {
							t.Error(err)
						}
						done.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("FIGURE cluster multi-key (hash tag %v): %d acquisitions of 3 of %d keys on 3 masters by 6 goroutines, %d overlaps",
			hashTag, done.Load(), len(keys), overlaps.Load())
		if overlaps.Load() != 0 || done.Load() != 90 {
			t.Fatalf("%d overlaps, %d of 90 acquisitions", overlaps.Load(), done.Load())
		}
	}
}
