package registry_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// Turns at a semaphore's permits: told to the waiting registry alone, on
// its turn channel, and passed on wherever a permit is free and nobody
// would otherwise be told (leave, a local pass, an attempt, ReleaseAfter).

// toldSince returns the lease that who gets on got, and fails t unless it
// came within a second of since, when event happened: a waiter told its
// turn, not one that tried at its poll (seconds later).
func toldSince(t *testing.T, got <-chan *registry.Lease, since time.Time, who, event string) *registry.Lease {
	t.Helper()
	le := recvWithin(t, got, 5*time.Second, who)
	if d := time.Since(since); d > time.Second {
		t.Fatalf("%s got a permit %v after %s: not told", who, d, event)
	}
	return le
}

// heardOn records the channels of every message published under the
// registry key pfx (release and turn channels), from a subscription of its
// own that is up when it returns.
func heardOn(t *testing.T, b *backend, pfx string) func() []string {
	t.Helper()
	c, err := redis.Dial("tcp", b.addr) // not pooled: closing it ends the receiver
	mustNil(t, err)
	psc := redis.PubSubConn{Conn: c}
	mustNil(t, psc.PSubscribe(pfx+"-*"))
	if m, ok := psc.Receive().(redis.Subscription); !ok || m.Kind != "psubscribe" {
		t.Fatalf("PSUBSCRIBE: %v", m)
	}
	var (
		mu    sync.Mutex
		heard []string
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			switch m := psc.Receive().(type) {
			case error:
				return
			case redis.Message:
				mu.Lock()
				heard = append(heard, m.Channel)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(heard)
	}
}

// A turn is told to the registry whose turn it is, on its own turn channels
// (wire.Layout.TurnChannel, and the grant's probe and message): no release
// message, and nothing to the registries behind it, which sleep on until
// their own turn.
func TestSemaphoreTurnToldToItsRegistryAlone(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		var rs []*registry.Registry
		var ss []*registry.Semaphore
		for range 3 {
			r := newRegPrefix(t, b.pool(t), pfx, opts...)
			rs, ss = append(rs, r), append(ss, semaphore(t, r, "k", 1))
		}
		heard := heardOn(t, b, pfx)
		// onlyTo fails t unless every message heard from the n-th on is on
		// a turn channel of registry id, and there is one: it waits for a
		// message besides the probe, which comes first.
		onlyTo := func(n int, id string) int {
			t.Helper()
			waitFor(t, time.Second, "the turn heard", func() bool {
				got := heard()
				return len(got) > n && slices.ContainsFunc(got[n:], func(ch string) bool { return ch != w.ProbeChannel(id, ss[1].Key()) })
			})
			got := heard()
			for _, ch := range got[n:] {
				if ch == w.ProbeChannel(id, ss[1].Key()) {
					continue // the probe before a grant, on its own channel
				}
				rest, ok := strings.CutPrefix(ch, w.TurnPrefix()+id)
				if !ok || !strings.HasSuffix(rest, ":"+ss[1].Key()) || rest[0] != ':' && rest[0] != '|' {
					t.Fatalf("messages: %q, want them on %s's turn channels alone", got[n:], id)
				}
			}
			return len(got)
		}
		a, err := ss[0].Acquire(bg(t), 0)
		mustNil(t, err)
		first := acquirePermit(bg(t), ss[1], 0)
		waitFor(t, 5*time.Second, "the first waiter in line", func() bool { return queueLen(t, b, ss[1].Key(), false) == 1 })
		second := acquirePermit(bg(t), ss[2], 0)
		waitFor(t, 5*time.Second, "the second waiter in line", func() bool { return queueLen(t, b, ss[1].Key(), false) == 2 })
		c := toldAfter(t, a, first, "the first in line")
		n := onlyTo(0, rs[1].ID())
		d := toldAfter(t, c, second, "the second in line")
		onlyTo(n, rs[2].ID())
		mustNil(t, d.Release(bg(t)))
	})
}

// scriptCounter counts a registry's runs of the script named name.
type scriptCounter struct {
	registry.Client
	name string
	n    atomic.Int32
}

func (c *scriptCounter) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == c.name {
		c.n.Add(1)
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A listener in line is given the permit by the release that gives it its
// turn (a grant, prelude.lua's deliver): it does not try again. The permit
// is its own, fenced after the holder's, and its release gives it back.
func TestSemaphoreTurnGrantsPermit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second), registry.WithFencing()}
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		c := &scriptCounter{Client: registry.NewPoolClient(b.pool(t)), name: "semacquire"}
		wr := newRegClientPrefix(t, c, pfx, opts...)
		waiter := semaphore(t, wr, "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		got := acquirePermit(bg(t), waiter, 0)
		waitFor(t, 5*time.Second, "the waiter in line, its registry listening", func() bool {
			return queueLen(t, b, holder.Key(), false) == 1 && wr.TurnsSubscribed()
		})
		// The subscription, once up, wakes the waiter: one more try, which
		// records a grant.
		waitRecord(t, b, pfx, holder.Key())
		tries := c.n.Load()
		le := toldAfter(t, a, got, "the waiter")
		if n := c.n.Load() - tries; n != 0 {
			t.Fatalf("the waiter ran semacquire.lua %d times after the release, want 0 (the release granted the permit)", n)
		}
		if le.Token() <= a.Token() || a.Token() != 0 && le.Token() <= 0 {
			t.Fatalf("fencing token %d after the holder's", le.Token())
		}
		if n := zcard(t, b, holder.Key()); n != 1 || queueLen(t, b, holder.Key(), false) != 0 {
			t.Fatalf("%d permits held, %d in line, want 1 and 0", n, queueLen(t, b, holder.Key(), false))
		}
		mustNil(t, le.Release(bg(t)))
		if n := zcard(t, b, holder.Key()); n != 0 {
			t.Fatalf("%d permits held after the release", n)
		}
	})
}

// A grant needs a registry that listens: a waiter whose registry hears
// nothing (its process died) is told its turn, as before grants, and given
// no permit, which would idle until its TTL.
func TestSemaphoreNoGrantToDeafWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		// A listener's entry with a grant record, of a registry that
		// subscribes to nothing.
		const ghost = "ghost/1"
		lk := holder.Key()
		due := time.Now().Add(time.Minute).UnixMilli() // the entry stays live
		b.do(t, "ZADD", w.QueueKey(lk), "1", ghost)
		b.do(t, "HSET", w.WaitersKey(lk), ghost, fmt.Sprintf("l %d %d", due, due+60000), ghost+"|", "ghost:tok#1 60000 7")
		mustNil(t, a.Release(bg(t)))
		if v := b.do(t, "ZSCORE", lk, "ghost:tok#1"); v != nil {
			t.Fatalf("the deaf waiter was granted a permit (score %v)", v)
		}
		if n := queueLen(t, b, lk, false); n != 1 {
			t.Fatalf("%d in line, want the deaf waiter still there (its turn given)", n)
		}
	})
}

// A waiter that leaves the line after it was told its turn (its context
// ended) passes the turn on: leave.lua tells the next in line at once,
// which would otherwise sleep until the told turn is over (2s here).
func TestSemaphoreLeaveTellsNext(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second),
			registry.WithTurns(2*time.Second, 0)}
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		next := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		// A listener first in line that will not try: due and lapsing
		// far ahead, as a process that is told and then gives up.
		lk := holder.Key()
		far := time.Now().Add(time.Hour).UnixMilli()
		b.do(t, "ZADD", w.QueueKey(lk), 1, "gone/1")
		b.do(t, "HSET", w.WaitersKey(lk), "gone/1", fmt.Sprintf("l %d %d", far, far))
		got := acquirePermit(bg(t), next, 0)
		waitFor(t, 5*time.Second, "the next waiter in line", func() bool { return queueLen(t, b, lk, false) == 2 })
		mustNil(t, a.Release(bg(t))) // the turn goes to gone/1
		notWithin(t, got, 300*time.Millisecond, "a permit for the waiter behind the one told")
		left := time.Now()
		mustNil(t, holder.LeaveAs(bg(t), "gone/1"))
		le := toldSince(t, got, left, "the next in line", "the told waiter left (its turn 2s)")
		mustNil(t, le.Release(bg(t)))
	})
}

// A registry first in line that keeps a permit handed from lease to lease
// leaves the line (no more of its leases wait); a permit that is free
// besides (here one given back without a message: its entry removed, as
// when a holder vanished) goes to the next in line at once: sempass.lua
// tells it, where it would otherwise sleep until its poll.
func TestSemaphorePassTellsNextOfOtherFreePermit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		xr := newRegPrefix(t, b.pool(t), pfx, opts...)
		x := semaphore(t, xr, "k", 2)
		// No free pass and no end of run: a1's release is a sempass.lua
		// that keeps the permit.
		a := semaphore(t, newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithRuns(time.Nanosecond, time.Minute))...), "k", 2)
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
		xl, err := x.Acquire(bg(t), 0)
		mustNil(t, err)
		a1, err := a.Acquire(bg(t), 0)
		mustNil(t, err)
		aNext := acquirePermit(bg(t), a, 0) // a's head queues: every permit is held
		waitFor(t, 5*time.Second, "a's head in line", func() bool { return queueLen(t, b, a.Key(), false) == 1 })
		otherNext := acquirePermit(bg(t), other, 0)
		waitFor(t, 5*time.Second, "the other registry in line", func() bool { return queueLen(t, b, a.Key(), false) == 2 })
		info, err := xr.Inspect(bg(t), "k")
		mustNil(t, err)
		for _, h := range info.Holders {
			if h.Registry == xr.ID() {
				b.do(t, "ZREM", a.Key(), h.Token) // x's permit is free, and nobody was told
			}
		}
		passed := time.Now()
		got := toldAfter(t, a1, aNext, "a's next lease") // sempass keeps the permit for it
		le := toldSince(t, otherNext, passed, "the next in line", "the pass (poll 3s)")
		mustNil(t, le.Release(bg(t)))
		mustNil(t, got.Release(bg(t)))
		_ = xl.Release(bg(t)) // its permit is gone
	})
}

// lostAcquireClient loses the reply of one semacquire.lua after it ran,
// and ends the waiter's context meanwhile.
type lostAcquireClient struct {
	registry.Client
	drop   atomic.Bool
	cancel context.CancelFunc
}

func (c *lostAcquireClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == "semacquire" && c.drop.Swap(false) {
		c.cancel()
		return nil, context.Canceled
	}
	return v, err
}

// A waiter whose attempt's reply was lost (the script queued it) and whose
// context then ended leaves the line: no entry is left for the next
// waiter to wait behind until it lapses.
func TestSemaphoreLostReplyLeavesLine(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	opts := []registry.Option{registry.WithIdleBetweenTries(10 * time.Second), registry.WithLogger(discardLogger)}
	holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
	ctx, cancel := context.WithCancel(bg(t))
	defer cancel()
	c := &lostAcquireClient{Client: registry.NewPoolClient(b.pool(t)), cancel: cancel}
	waiter := semaphore(t, newRegClientPrefix(t, c, pfx, opts...), "k", 1)
	a, err := holder.Acquire(bg(t), 0)
	mustNil(t, err)
	defer a.Release(bg(t))
	c.drop.Store(true)
	if le, err := waiter.Acquire(ctx, 0); err == nil {
		t.Fatalf("Acquire with its context ended: %v", le)
	}
	waitFor(t, 2*time.Second, "the waiter's entry out of line", func() bool { return queueLen(t, b, holder.Key(), false) == 0 })
}

// A lease that ends with ReleaseAfter(d) leaves its permit taken for d;
// once it has expired, the waiter in line is told (semnudge.lua), where it
// would otherwise sleep until its poll: it was told of the permit's old
// expiry.
func TestSemaphoreReleaseAfterTellsWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		_, a, got := heldAndAwaited(t, b)
		const d = 300 * time.Millisecond
		ended := time.Now()
		mustNil(t, a.ReleaseAfter(bg(t), d))
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		if took := time.Since(ended); took < d-50*time.Millisecond || took > d+time.Second {
			t.Fatalf("the waiter got the permit %v after ReleaseAfter(%v) (poll 3s)", took, d)
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// A waiter second in line whose attempt finds two permits free (both
// expired, and not yet pruned) takes one; the other goes to the first in
// line at once (semacquire.lua tells it), which would otherwise sleep until
// its poll.
func TestSemaphoreAttemptTellsFirstOfOtherFreePermit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLogger(discardLogger)), "k", 2)
		first := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(3*time.Second)), "k", 2)
		second := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.SpinLock),
			registry.WithIdleBetweenTries(100*time.Millisecond)), "k", 2)
		for range 2 {
			_, err := holder.Acquire(bg(t), 0)
			mustNil(t, err)
		}
		firstGot := acquirePermit(bg(t), first, 0)
		waitFor(t, 5*time.Second, "the first in line", func() bool { return queueLen(t, b, first.Key(), false) == 1 })
		secondGot := acquirePermit(bg(t), second, 0)
		waitFor(t, 5*time.Second, "the second in line", func() bool { return queueLen(t, b, first.Key(), false) == 2 })
		tokens, err := redis.Strings(b.do(t, "ZRANGE", first.Key(), 0, -1), nil)
		mustNil(t, err)
		expired := time.Now()
		for _, tok := range tokens {
			b.do(t, "ZADD", first.Key(), "XX", 1, tok) // expired long ago, and nobody told
		}
		le := recvWithin(t, secondGot, 5*time.Second, "the second in line, at its poll")
		fe := toldSince(t, firstGot, expired, "the first in line", "the permits expired (poll 3s)")
		mustNil(t, le.Release(bg(t)))
		mustNil(t, fe.Release(bg(t)))
	})
}

// A nudge that finds the permit still alive (its expiry moved later, as
// when the clocks differ) tries again when it should have expired: the
// waiter is told then, not at its poll.
func TestSemaphoreReleaseAfterNudgeRetries(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		holder, a, got := heldAndAwaited(t, b)
		ended := time.Now()
		mustNil(t, a.ReleaseAfter(bg(t), 400*time.Millisecond))
		tokens, err := redis.Strings(b.do(t, "ZRANGE", holder.Key(), 0, -1), nil)
		mustNil(t, err)
		now, err := redis.Strings(b.do(t, "TIME"), nil)
		mustNil(t, err)
		if len(tokens) != 1 || time.Since(ended) > 300*time.Millisecond {
			t.Fatalf("permits %q %v after ReleaseAfter(400ms): too late to move its expiry", tokens, time.Since(ended))
		}
		sec, _ := strconv.ParseInt(now[0], 10, 64)
		usec, _ := strconv.ParseInt(now[1], 10, 64)
		b.do(t, "ZADD", holder.Key(), "XX", sec*1000+usec/1000+1000, tokens[0]) // it expires 1s from now instead
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		if took := time.Since(ended); took < 900*time.Millisecond || took > 2*time.Second {
			t.Fatalf("the waiter got the permit %v after ReleaseAfter (expiry moved to 1s; poll 3s)", took)
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// heldAndAwaited makes two PubSubLock registries (poll 3s) on a 1-permit
// semaphore: a holds its permit (TTL 10s), and a lease of the other waits
// in line for it (got).
func heldAndAwaited(t *testing.T, b *backend) (holder *registry.Semaphore, a *registry.Lease, got <-chan *registry.Lease) {
	t.Helper()
	pfx := prefix(t)
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
	holder = semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
	waiter := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
	a, err := holder.Acquire(bg(t), 10*time.Second)
	mustNil(t, err)
	got = acquirePermit(bg(t), waiter, 0)
	waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, holder.Key(), false) == 1 })
	return holder, a, got
}

// heldLeave holds back every run of leave.lua until let is closed, and
// counts the runs of leave.lua that wait and that ended, and of
// semacquire.lua.
type heldLeave struct {
	registry.Client
	let                    chan struct{}
	waiting, left, acquire atomic.Int32
}

func (c *heldLeave) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	switch s.Name() {
	case "leave":
		c.waiting.Add(1)
		<-c.let
		defer c.left.Add(1)
	case "semacquire":
		defer c.acquire.Add(1)
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A waiter's entry is never removed by its own stale leave (issue 37,
// fault 1): the last lease stops waiting while queued, its leave runs late,
// after the next lease of the same instance queued again; that lease keeps
// its entry, and is told its turn when the permit is given back, not left
// to sleep until its poll (3s).
func TestStaleLeaveKeepsTheNextWait(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, plainOpts...), "k", 1)
		held, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		hc := &heldLeave{Client: registry.NewPoolClient(b.pool(t)), let: make(chan struct{})}
		var letOnce sync.Once
		let := func() { letOnce.Do(func() { close(hc.let) }) }
		s := semaphore(t, newRegClientPrefix(t, hc, pfx, plainOpts...), "k", 1)
		t.Cleanup(let) // registered after the registry's Close: runs before it
		ctx, cancel := context.WithCancel(bg(t))
		first := acquirePermit(ctx, s, 0)
		waitFor(t, 5*time.Second, "the first lease in line", func() bool { return queueLen(t, b, holder.Key(), false) == 1 })
		cancel()
		if le := recvWithin(t, first, 5*time.Second, "the first lease to give up"); le != nil {
			t.Fatal("a lease whose ctx ended got a permit")
		}
		waitFor(t, 5*time.Second, "the first lease's leave", func() bool { return hc.waiting.Load() == 1 })
		tries := hc.acquire.Load()
		next := acquirePermit(bg(t), s, 0)
		waitFor(t, 5*time.Second, "the next lease's attempt", func() bool { return s.Waiting() == 1 && hc.acquire.Load() > tries })
		let() // the stale leave runs now
		waitFor(t, 5*time.Second, "the stale leave", func() bool { return hc.left.Load() == 1 })
		if n := queueLen(t, b, holder.Key(), false); n != 1 {
			t.Errorf("%d entries in line after the stale leave, want the next lease's", n)
		}
		released := time.Now()
		mustNil(t, held.Release(bg(t)))
		toldWithin(t, next, released)
	})
}

// regrantClient runs one semacquire.lua twice, as a client that resends
// after a lost reply does, and calls between runs (after the first, which
// queues the waiter) between, which releases the permit: the release
// grants it to the first run's token, and the second run finds it that
// token's.
type regrantClient struct {
	registry.Client
	between atomic.Pointer[func()]
}

func (c *regrantClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	f := c.between.Load()
	if s.Name() != "semacquire" || f == nil || !c.between.CompareAndSwap(f, nil) {
		return c.Client.Eval(ctx, s, keys, args)
	}
	if _, err := c.Client.Eval(ctx, s, keys, args); err != nil {
		return nil, err
	}
	(*f)()
	return c.Client.Eval(ctx, s, keys, args)
}

// A permit granted to an attempt that its client resent, and that the
// resend found its own, is held once: by one lease of the registry, not by
// the attempt's lease and, as a spare, by the next one.
func TestSemaphoreGrantOfResentAttemptHeldOnce(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		c := &regrantClient{Client: registry.NewPoolClient(b.pool(t))}
		wr := newRegClientPrefix(t, c, pfx, opts...)
		waiter := semaphore(t, wr, "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		// The waiter's registry listens for its turns once an attempt was
		// refused.
		ctx, cancel := context.WithTimeout(bg(t), 100*time.Millisecond)
		_, err = waiter.Acquire(ctx, 0)
		cancel()
		mustIs(t, err, context.DeadlineExceeded)
		waitFor(t, 5*time.Second, "the waiter's registry listening, out of line", func() bool {
			return wr.TurnsSubscribed() && queueLen(t, b, holder.Key(), false) == 0
		})
		release := func() { mustNil(t, a.Release(bg(t))) }
		c.between.Store(&release)
		one, two := acquirePermit(bg(t), waiter, 0), acquirePermit(bg(t), waiter, 0)
		var first *registry.Lease
		select {
		case first = <-one:
		case first = <-two:
			one, two = two, one
		case <-time.After(5 * time.Second):
			t.Fatal("no lease got the granted permit")
		}
		if first == nil {
			t.Fatal("Acquire failed")
		}
		notWithin(t, two, 300*time.Millisecond, "a second lease on the one permit")
		if n := zcard(t, b, holder.Key()); n != 1 {
			t.Fatalf("%d permits held, want 1", n)
		}
		mustNil(t, first.Release(bg(t)))
		second := recvWithin(t, two, 5*time.Second, "the second lease, after the first's release")
		mustNil(t, second.Release(bg(t)))
	})
}
