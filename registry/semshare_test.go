package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Permits are never exceeded: 8 goroutines in each of 3 registries (two
// woken by turn messages, one polling) on 3 permits. Occupancy is
// counted in Redis at every entry.
func TestSemaphoreNeverOverLimit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		const regs, goroutines, iters, permits = 3, 8, 8, 3
		pfx := prefix(t)
		occ := pfx + ":occupancy"
		var over, done atomic.Int64
		var wg sync.WaitGroup
		for i := range regs {
			lt := registry.PubSubLock
			if i == regs-1 {
				lt = registry.SpinLock
			}
			r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt), registry.WithIdleBetweenTries(20*time.Millisecond))
			s := semaphore(t, r, "exports", permits)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range iters {
						le, err := s.Acquire(bg(t), 0)
						if err != nil {
							t.Error(err)
							return
						}
						if n, _ := redis.Int(redistest.Do(b.addr, "INCR", occ)); n > permits {
							over.Add(1)
						}
						_, _ = redistest.Do(b.addr, "DECR", occ)
						if err := le.Release(bg(t)); err != nil {
							t.Error(err)
						}
						done.Add(1)
					}
				}()
			}
		}
		wg.Wait()
		if over.Load() > 0 {
			t.Fatalf("%d entries over the limit of %d", over.Load(), permits)
		}
		if done.Load() != regs*goroutines*iters {
			t.Fatalf("%d acquisitions, want %d", done.Load(), regs*goroutines*iters)
		}
		b.do(t, "DEL", occ)
		assertNoKeys(t, b, pfx)
	})
}

// Waiters of several registries take turns: on one permit, each of four
// registries (one goroutine each, mixed PubSubLock and SpinLock) gets a
// fair share of the acquisitions; none starves.
func TestSemaphoreTurnsAcrossRegistries(t *testing.T) {
	b := realBackend()
	const regs = 4
	pfx := prefix(t)
	counts := make([]atomic.Int64, regs)
	ctx, cancel := context.WithTimeout(bg(t), 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range regs {
		lt := registry.PubSubLock
		if i%2 == 1 {
			lt = registry.SpinLock
		}
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt), registry.WithIdleBetweenTries(20*time.Millisecond))
		s := semaphore(t, r, "one", 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				le, err := s.Acquire(ctx, 0)
				if err != nil {
					return
				}
				counts[i].Add(1)
				time.Sleep(time.Millisecond) // the work under the permit
				_ = le.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	var all []int64
	var total int64
	for i := range counts {
		all = append(all, counts[i].Load())
		total += counts[i].Load()
	}
	share := float64(slices.Min(all)) / float64(total)
	t.Logf("acquisitions per registry %v; smallest share %.3f (fair: %.3f)", all, share, 1.0/regs)
	if share < 0.5/regs {
		t.Fatalf("smallest share %.3f, want at least half of the fair %.3f", share, 1.0/regs)
	}
}

// Processes that disagree on the count of permits are told: while
// permits of one count are held, a Semaphore of another fails at once
// with ErrInvalidConfig naming both (waiting or not, leaving no entry in
// line), at its first acquisition and then at most once a second, and
// Inspect shows the count. Once every permit is free, or has expired, the
// next acquisition sets the count. A permit whose token carries no count
// (an older lockyard's) is not compared.
func TestSemaphorePermitsDisagree(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r1 := newRegPrefix(t, b.pool(t), pfx)
		one := semaphore(t, r1, "k", 1)
		sn := newCommandNames(b.pool(t))
		two := semaphore(t, newRegClientPrefix(t, sn, pfx), "k", 2)
		refused := func(s *registry.Semaphore, held, mine int) {
			t.Helper()
			_, err := s.TryAcquire(bg(t), 0)
			mustIs(t, err, registry.ErrInvalidConfig)
			if want := fmt.Sprintf("held with %d permits, not %d", held, mine); !strings.Contains(err.Error(), want) {
				t.Fatalf("TryAcquire: %v, want it to say %q", err, want)
			}
			ctx, cancel := context.WithTimeout(bg(t), 5*time.Second)
			defer cancel()
			_, err = s.Acquire(ctx, 0)
			mustIs(t, err, registry.ErrInvalidConfig) // at once, not at the deadline
		}
		fresh := func(n int) *registry.Semaphore { return semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", n) }

		a, err := one.TryAcquire(bg(t), 0)
		mustNil(t, err)
		if m := b.do(t, "ZRANGE", one.Key(), 0, -1).([]any); len(m) != 1 || !strings.HasSuffix(string(m[0].([]byte)), "#1") {
			t.Fatalf("the permits are %q, want one whose token ends with its count", m)
		}
		refused(two, 1, 2)
		if info := inspect(t, r1, "k"); info.Permits != 1 || len(info.Holders) != 1 || len(info.Waiters) != 0 {
			t.Fatalf("Inspect: %+v, want 1 holder of a count of 1 and nobody waiting", info)
		}
		mustNil(t, a.Release(bg(t)))

		sn.take()
		c, err := two.TryAcquire(bg(t), 0) // every permit free: the count is 2 from now on
		mustNil(t, err)
		mustNil(t, c.Release(bg(t)))
		if ran := sn.take(); slices.Contains(ran, "semrelease") {
			// The refusals were error replies, which change nothing: the
			// instance neither queued nor expects waiters.
			t.Fatalf("after the refusals, an uncontended permit ran %v, want its plain release", ran)
		}
		c, err = two.TryAcquire(bg(t), 0)
		mustNil(t, err)
		if info := inspect(t, r1, "k"); info.Permits != 2 {
			t.Fatalf("Inspect: %+v, want a count of 2", info)
		}
		refused(fresh(1), 2, 1)
		mustNil(t, c.Release(bg(t)))

		// A permit whose token carries no count (an older lockyard's) is
		// not compared; a permit of another count that expired is not,
		// though it is not pruned yet (fewer are held than the count).
		now := b.do(t, "TIME").([]any)
		sec, _ := strconv.ParseInt(string(now[0].([]byte)), 10, 64)
		b.do(t, "ZADD", one.Key(), (sec+60)*1000, "an-older-lockyard:0000000000000001")
		b.do(t, "PEXPIRE", one.Key(), 60000)
		a, err = two.TryAcquire(bg(t), registry.MinExpireAfter) // 1 held, with no count
		mustNil(t, err)
		waitFor(t, 5*time.Second, "the permit to expire", func() bool { return len(inspect(t, r1, "k").Holders) == 1 })
		three := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 3)
		c, err = three.TryAcquire(bg(t), 0)
		mustNil(t, err)
		mustNil(t, c.Release(bg(t)))
		_ = a.Release(bg(t)) // lost
		b.do(t, "DEL", one.Key())

		// An expired permit without a count ahead of the others turns no
		// comparison off: the soonest live permit's count is compared.
		b.do(t, "ZADD", one.Key(), (sec-10)*1000, "an-older-lockyard:0000000000000002")
		b.do(t, "PEXPIRE", one.Key(), 60000)
		c, err = three.TryAcquire(bg(t), 0)
		mustNil(t, err)
		refused(fresh(2), 3, 2)

		// A Semaphore that compared before compares again a second later:
		// one's count of 1, beside a permit of 3, is refused by the
		// permits held until then.
		waitFor(t, 5*time.Second, "the count compared again", func() bool {
			_, err := one.TryAcquire(bg(t), 0)
			if !errors.Is(err, registry.ErrNotObtained) {
				mustIs(t, err, registry.ErrInvalidConfig)
				return true
			}
			return false
		})
		mustNil(t, c.Release(bg(t)))
		b.do(t, "DEL", one.Key())
	})
}

// resentAcquire runs a semacquire.lua once armed as a resend does: its
// permit was taken by a first run whose reply was lost (added here, for two
// minutes), and the script runs again.
type resentAcquire struct {
	registry.Client
	b     *backend
	t     *testing.T
	armed atomic.Bool
}

func (c *resentAcquire) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "semacquire" && c.armed.CompareAndSwap(true, false) {
		now := c.b.do(c.t, "TIME").([]any)
		sec, _ := strconv.ParseInt(string(now[0].([]byte)), 10, 64)
		c.b.do(c.t, "ZADD", keys[0], (sec+120)*1000, args[0]) // after every other permit
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A resend of an acquisition whose first run took a permit gets that
// permit, though the soonest live permit is of another count (counts mixed
// by a permit without one): it is not refused, leaving its permit held by
// no one.
func TestSemaphoreResendBeforeOtherCount(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		two := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 2)
		c := &resentAcquire{Client: registry.NewPoolClient(b.pool(t)), b: b, t: t}
		five := semaphore(t, newRegClientPrefix(t, c, pfx), "k", 5)
		a, err := two.TryAcquire(bg(t), 0)
		mustNil(t, err)
		c.armed.Store(true)
		p, err := five.TryAcquire(bg(t), 0)
		mustNil(t, err)
		mustNil(t, p.Release(bg(t)))
		mustNil(t, a.Release(bg(t)))
		if n, _ := redis.Int(b.do(t, "EXISTS", two.Key()), nil); n != 0 {
			t.Fatal("a permit is left held by no one")
		}
	})
}

// A permit released while another lease of the same registry waits passes
// to it without a command (a free pass); with fencing, with one command
// that gives it a new token. Nobody else waits, so the permit is kept.
func TestSemaphoreLocalPass(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(fmt.Sprintf("fencing=%v", fencing), func(t *testing.T) {
			b := realBackend()
			cp := &redistest.CountingPool{Pool: b.pool(t)}
			// Free passes go on for a minute after the last command, so
			// that the wait for the lease to queue does not end them.
			opts := []registry.Option{registry.WithRuns(time.Minute, time.Minute)}
			if fencing {
				opts = append(opts, registry.WithFencing())
			}
			r := newReg(t, cp, opts...)
			s := semaphore(t, r, "k", 1)
			a, err := s.Acquire(bg(t), 0)
			mustNil(t, err)
			next := acquirePermit(bg(t), s, 0)
			waitFor(t, 5*time.Second, "the second lease to queue", func() bool { return s.Waiting() == 1 })
			cp.Commands()
			mustNil(t, a.Release(bg(t)))
			c := recvWithin(t, next, 5*time.Second, "the passed permit")
			cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" }) // after NOSCRIPT: the same script
			want := 0
			if fencing {
				want = 1
				if c.Token() <= a.Token() {
					t.Errorf("token %d after a pass from %d", c.Token(), a.Token())
				}
			}
			if len(cmds) != want {
				t.Fatalf("commands of the pass: %v, want %d", cmds, want)
			}
			if n := zcard(t, b, s.Key()); n != 1 {
				t.Fatalf("%d permits in Redis after the pass, want 1", n)
			}
			mustNil(t, c.Release(bg(t)))
		})
	}
}

// A permit of a semaphore of 2 permits, released 1.2 s after it was taken
// while a lease of the same registry waits, passes to it without a command
// when free passes go on for 800 ms (1.6 s for a semaphore of several
// permits); that of a semaphore of 1 permit goes by the pass script, and so
// does that of a semaphore of 3 permits released after 2 s: twice the span,
// not three times. A free pass is told only if the release comes within
// 1.6 s: a stalled machine's attempt is made again, up to 3 times.
func TestSemaphoreFreePassSpan(t *testing.T) {
	const span = 800 * time.Millisecond
	for _, tc := range []struct {
		permits int
		after   time.Duration
		free    bool
	}{
		{1, span * 3 / 2, false},
		{2, span * 3 / 2, true},
		{3, span * 5 / 2, false},
	} {
		t.Run(fmt.Sprintf("permits=%d", tc.permits), func(t *testing.T) {
			b := realBackend()
			// pass releases a permit of a new semaphore after tc.after while
			// the next lease waits, and returns the commands sent from the
			// release until the next lease has the permit, and whether the
			// release came in time to tell a free pass.
			pass := func(key string) ([]string, bool) {
				cp := &redistest.CountingPool{Pool: b.pool(t)}
				// The waiting lease's attempts (every poll) would be counted
				// with the pass: it polls once a minute.
				r := newReg(t, cp, registry.WithRuns(span, time.Hour), registry.WithIdleBetweenTries(time.Minute))
				s := semaphore(t, r, key, tc.permits)
				start := time.Now()
				a, err := s.Acquire(bg(t), 0)
				mustNil(t, err)
				for range tc.permits - 1 { // every other permit held too: the next lease waits for a's
					o, err := s.Acquire(bg(t), 0)
					mustNil(t, err)
					defer func() { mustNil(t, o.Release(bg(t))) }()
				}
				acquired := time.Now()
				next := acquirePermit(bg(t), s, 0)
				waitFor(t, 5*time.Second, "the next lease to wait", func() bool { return s.Waiting() == 1 })
				time.Sleep(time.Until(acquired.Add(tc.after))) // the span is what is tested: time must pass
				cp.Commands()
				mustNil(t, a.Release(bg(t)))
				late := time.Since(start)
				c := recvWithin(t, next, 5*time.Second, "the passed permit")
				cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" })
				mustNil(t, c.Release(bg(t)))
				return cmds, late < 2*span
			}
			want := []string{"EVALSHA"} // the pass script
			if tc.free {
				want = nil
			}
			for try := 1; ; try++ {
				cmds, inTime := pass(fmt.Sprintf("k%d", try))
				if tc.free && !inTime {
					if try < 3 {
						t.Logf("try %d: the release came too late to tell a free pass (a stalled machine): again", try)
						continue
					}
					t.Fatal("the release came too late to tell a free pass 3 times")
				}
				if !slices.Equal(cmds, want) {
					t.Fatalf("commands of the pass: %v, want %v", cmds, want)
				}
				break
			}
		})
	}
}

// A permit released while a lease of the same registry and a waiter of
// another registry wait goes to the waiter in line first: the local lease
// waits for its turn.
func TestSemaphorePassYieldsToWaitersInLine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		// No free pass (it would not look in Redis): the pass script.
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithRuns(time.Nanosecond, time.Minute)}
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		a, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		theirs := acquirePermit(bg(t), other, 0)
		waitFor(t, 5*time.Second, "the other registry to queue in Redis", func() bool {
			n, _ := redis.Int(b.do(t, "ZCARD", queueKey(s.Key(), false)), nil)
			return n == 1
		})
		ours := acquirePermit(bg(t), s, 0)
		waitFor(t, 5*time.Second, "the local lease to queue", func() bool { return s.Waiting() == 1 })
		mustNil(t, a.Release(bg(t)))
		c := recvWithin(t, theirs, 5*time.Second, "the permit, for the waiter in line")
		notWithin(t, ours, 100*time.Millisecond, "the local lease, while the other holds")
		mustNil(t, c.Release(bg(t)))
		d := recvWithin(t, ours, 5*time.Second, "the local lease after the other's release")
		mustNil(t, d.Release(bg(t)))
	})
}

// A free permit is kept for the waiter first in line while its turn lasts:
// a newcomer's TryAcquire is refused. A waiter that does not come in its
// turn (it vanished) is dropped once the turn is over, and the newcomer
// gets the permit.
func TestSemaphoreTurnKeptForWaiterInLine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := semaphore(t, newReg(t, b.pool(t), registry.WithTurns(300*time.Millisecond, 0)), "k", 1)
		qk := queueKey(s.Key(), false)
		wk := strings.TrimSuffix(qk, ":queue") + ":waiters"
		now := serverMillis(t, b)
		b.do(t, "ZADD", qk, now-1000, "vanished/1")
		b.do(t, "HSET", wk, "vanished/1", fmt.Sprintf("l %d %d", now+60000, now+120000))
		start := time.Now()
		_, err := s.TryAcquire(bg(t), 0)
		mustIs(t, err, registry.ErrNotObtained)
		var le *registry.Lease
		waitFor(t, 5*time.Second, "the permit after the vanished waiter's turn", func() bool {
			le, err = s.TryAcquire(bg(t), 0)
			return err == nil
		})
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("the newcomer got the permit %v after the turn began, before the turn ended", d)
		}
		mustNil(t, le.Release(bg(t)))
		if n := queueLen(t, b, s.Key(), false); n != 0 {
			t.Fatalf("%d entries left in the queue", n)
		}
	})
}

// The leases of one registry wait locally: one entry per registry in the
// key's wait queue, however many of its leases wait, and they all get
// their permits, in turn with another registry's.
func TestSemaphoreOneEntryPerRegistry(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock)}
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		var held []*registry.Lease
		for range 2 {
			le, err := holder.Acquire(bg(t), 0)
			mustNil(t, err)
			held = append(held, le)
		}
		got := make(chan *registry.Lease, 4)
		for range 4 {
			go func() { got <- <-acquirePermit(bg(t), s, 0) }()
		}
		waitFor(t, 5*time.Second, "four leases waiting", func() bool { return s.Waiting() == 4 })
		waitFor(t, 5*time.Second, "the registry in the wait queue", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
		time.Sleep(50 * time.Millisecond) // no more entries come
		if n := queueLen(t, b, s.Key(), false); n != 1 {
			t.Fatalf("%d entries in the wait queue for one registry, want 1", n)
		}
		for _, le := range held {
			mustNil(t, le.Release(bg(t)))
		}
		for i := range 4 { // two at a time: each is released as it comes
			le := recvWithin(t, got, 5*time.Second, fmt.Sprintf("lease %d", i))
			mustNil(t, le.Release(bg(t)))
		}
		assertNoKeys(t, b, pfx)
	})
}

// A lease held past the run of local holds (chainSpan) gives its permit
// back even though a lease of its registry waits in Redis, and the turn of
// the permit is announced: the waiting lease gets it at once, not at its
// next poll.
func TestSemaphoreLongHoldWakesWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		o, err := other.Acquire(bg(t), 0)
		mustNil(t, err)
		defer o.Release(bg(t))
		a, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		next := acquirePermit(bg(t), s, 0)
		waitFor(t, 5*time.Second, "the waiting lease in the wait queue", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
		time.Sleep(50 * time.Millisecond) // past chainSpan: the pass gives the permit back
		c := toldAfter(t, a, next, "the waiting lease")
		mustNil(t, c.Release(bg(t)))
	})
}

// A registry whose head is granted a permit with more leases behind it,
// before any attempt of its failed, is queued again as a listener: it
// subscribes then, so that the turn message that tells it its turn
// reaches it (the lease behind got the free permit 2.3s late otherwise,
// at its poll).
func TestSemaphoreQueuedAgainListens(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
	x := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
	y := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
	// x's two leases expire in Redis but stay held locally: its next head
	// waits locally (it holds every permit), and never fails an attempt.
	l0, err := x.Acquire(bg(t), 100*time.Millisecond)
	mustNil(t, err)
	l1, err := x.Acquire(bg(t), 100*time.Millisecond)
	mustNil(t, err)
	waitFor(t, 5*time.Second, "x's permits to expire in Redis", func() bool { return pttl(t, b, x.Key()) == -2 })
	o, err := y.Acquire(bg(t), 0)
	mustNil(t, err)
	a := acquirePermit(bg(t), x, 0)
	waitFor(t, 5*time.Second, "x's head", func() bool { return x.Waiting() == 1 })
	next := acquirePermit(bg(t), x, 0)
	waitFor(t, 5*time.Second, "the lease behind it", func() bool { return x.Waiting() == 2 })
	mustIs(t, l0.Release(bg(t)), registry.ErrLockLost)
	la := recvWithin(t, a, 5*time.Second, "x's head, granted with a lease behind it")
	mustIs(t, l1.Release(bg(t)), registry.ErrLockLost)
	waitFor(t, 5*time.Second, "x queued again", func() bool { return queueLen(t, b, x.Key(), false) == 1 })
	c := toldAfter(t, o, next, "the lease behind, of the queued-again registry")
	mustNil(t, c.Release(bg(t)))
	mustNil(t, la.Release(bg(t)))
}

// A head that takes a permit handed off by a lease of its registry leaves
// the instance's wait in line to the next head: the next head waits for
// the instance's turn instead of trying at once (an attempt that can only
// fail: one per local hand-off under contention), and its turn, told by
// the turn message, still wakes it.
func TestSemaphoreNextHeadKeepsWait(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		// Free passes for a minute: the local hand-off sends no command.
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		r := newRegPrefix(t, cp, pfx, append(opts, registry.WithRuns(time.Minute, time.Minute))...)
		s := semaphore(t, r, "k", 2)
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		turnsSubscribed(t, r, s, other)
		o, a, first := headQueued(t, b, s, other)
		second := acquirePermit(bg(t), s, 0)
		waitFor(t, 5*time.Second, "two leases waiting", func() bool { return s.Waiting() == 2 })
		cp.Commands()
		mustNil(t, a.Release(bg(t)))
		c := recvWithin(t, first, 5*time.Second, "the head, with the permit handed off")
		notWithin(t, second, 200*time.Millisecond, "the next head, while every permit is held")
		if cmds := cp.Commands(); len(cmds) != 0 {
			t.Fatalf("commands after the hand-off: %v, want none (the next head tried before its turn)", cmds)
		}
		d := toldAfter(t, o, second, "the next head, at its turn")
		mustNil(t, c.Release(bg(t)))
		mustNil(t, d.Release(bg(t)))
		assertNoKeys(t, b, pfx)
	})
}

// A head that took a permit kept for it by sempass.lua (the last lease of
// its registry that waited: the entry leaves the line) leaves no wait to
// the next: a lease that comes later tries Redis at once instead of
// waiting out the old entry's poll.
func TestSemaphoreNewHeadAfterEntryLeft(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		// Polling every 3s, and no free pass: the hand-off runs sempass.lua.
		s := semaphore(t, newRegPrefix(t, cp, pfx, registry.WithLockType(registry.SpinLock), registry.WithIdleBetweenTries(3*time.Second),
			registry.WithRuns(time.Nanosecond, time.Minute)), "k", 2)
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 2)
		o, a, first := headQueued(t, b, s, other)
		mustNil(t, a.Release(bg(t)))
		c := recvWithin(t, first, 5*time.Second, "the head, with the permit kept for it")
		if n := queueLen(t, b, s.Key(), false); n != 0 {
			t.Fatalf("%d entries in the wait queue after the kept permit, want 0", n)
		}
		cp.Commands()
		second := acquirePermit(bg(t), s, 0)
		waitFor(t, time.Second, "the new head's attempt", func() bool { return len(cp.Commands()) > 0 })
		mustNil(t, c.Release(bg(t)))
		d := recvWithin(t, second, 5*time.Second, "the new head, with the permit handed off")
		mustNil(t, d.Release(bg(t)))
		mustNil(t, o.Release(bg(t)))
		assertNoKeys(t, b, pfx)
	})
}

// toldAfter releases le, then waits for the lease that ch sends and fails
// unless it came within a second of the release: its registry polls every
// 3s, so only the turn message can have woken it in time.
func toldAfter(t *testing.T, le *registry.Lease, ch <-chan *registry.Lease, what string) *registry.Lease {
	t.Helper()
	released := time.Now()
	mustNil(t, le.Release(bg(t)))
	got := recvWithin(t, ch, 5*time.Second, what)
	if d := time.Since(released); d > time.Second {
		t.Fatalf("%s got the permit %v after the release (poll 3s): not told", what, d)
	}
	return got
}

// turnsSubscribed makes a lease of s (a semaphore of 2, of registry r)
// wait while other holds both permits, until r's subscription to its
// turns is taken, and then lets everything go: a subscription taken later
// wakes every waiter of r to try again (messages may have been missed),
// an attempt that a test counting commands would take for a head's.
func turnsSubscribed(t *testing.T, r *registry.Registry, s, other *registry.Semaphore) {
	t.Helper()
	var held []*registry.Lease
	for range 2 {
		le, err := other.Acquire(bg(t), 0)
		mustNil(t, err)
		held = append(held, le)
	}
	w := acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the turn subscription", r.TurnsSubscribed)
	mustNil(t, held[0].Release(bg(t)))
	mustNil(t, recvWithin(t, w, 5*time.Second, "the waiting lease").Release(bg(t)))
	mustNil(t, held[1].Release(bg(t)))
}

// headQueued fills the 2 permits of s (a semaphore of 2), one with a lease
// of other and one with a lease of s, and makes a third lease of s wait in
// Redis: its registry's head, queued. It returns the leases and the
// waiting one's channel.
func headQueued(t *testing.T, b *backend, s, other *registry.Semaphore) (o, a *registry.Lease, first <-chan *registry.Lease) {
	t.Helper()
	o, err := other.Acquire(bg(t), 0)
	mustNil(t, err)
	a, err = s.Acquire(bg(t), 0)
	mustNil(t, err)
	first = acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the head in the wait queue", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
	return o, a, first
}

// The next head's inherited wait counts the turn messages from the
// last head's attempt on: one that came before the next head began to wait
// (its turn) makes it try at once, not at the end of the wait.
func TestSemaphoreInheritedWaitCountsEarlierMessages(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := semaphore(t, newReg(t, b.pool(t), registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3*time.Second)), "k", 1)
		s.InheritToldWait(3 * time.Second)
		start := time.Now()
		le := recvWithin(t, acquirePermit(bg(t), s, 0), 5*time.Second, "the permit")
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the head took the free permit %v late: it did not count the message of its turn", d)
		}
		mustNil(t, le.Release(bg(t)))
	})
}
