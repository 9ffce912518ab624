package registry_test

// Grants under faults: lost replies, lost grant messages, claims racing
// grants (from a review of the grants, each reproduced before its fix).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// ambiguousRefusal: the semacquire.lua run that carries a grant record is
// run, refused (queued, record written), then `between` runs (a release
// elsewhere, which grants the record), then the client reports a network
// error: the reply was lost.
type ambiguousRefusal struct {
	registry.Client
	between atomic.Pointer[func()]
}

func (c *ambiguousRefusal) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == "semacquire" && err == nil && len(args) >= 18 && args[17] != "" {
		if x, ok := v.([]any); ok && len(x) == 3 && x[0] != int64(1) {
			if f := c.between.Swap(nil); f != nil {
				(*f)()
				return nil, errors.New("lockyard-test: i/o timeout")
			}
		}
	}
	return v, err
}

// An attempt whose reply was lost after it was refused, and whose record
// was granted meanwhile: its give-back leaves the granted permit, which its
// lease holds; one lease of a semaphore of 1 at most.
func TestSemaphoreGrantAfterLostReplyHeldOnce(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		c := &ambiguousRefusal{Client: registry.NewPoolClient(b.pool(t))}
		wr := newRegClientPrefix(t, c, pfx, append(grantee[:len(grantee):len(grantee)], registry.WithLogger(discardLogger))...)
		waiter := semaphore(t, wr, "k", 1)
		listenTurns(t, b, wr, waiter)
		release := func() { mustNil(t, a.Release(bg(t))) }
		c.between.Store(&release)
		got := acquirePermit(bg(t), waiter, 10*time.Second)
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		time.Sleep(200 * time.Millisecond) // let the background give-back run
		lost := false
		select {
		case <-le.Lost():
			lost = true
		default:
		}
		n := zcard(t, b, holder.Key())
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		if _, err := other.TryAcquire(bg(t), 0); err == nil {
			t.Fatalf("two leases of a 1-permit semaphore: the waiter's (lost=%v) and another registry's; ZCARD before the TryAcquire=%d", lost, n)
		}
	})
}

// A grant message that comes while an attempt records the number it got
// (before its hold is installed) does not look at that hold.
func TestSemaphoreGrantDuringTakeNoPanic(t *testing.T) {
	b := realBackend()
	r := newRegPrefix(t, b.pool(t), prefix(t), grantee...)
	s := semaphore(t, r, "k", 1)
	if err := registry.TookThenGranted(s); err != nil {
		t.Fatal(err)
	}
}

// A grant whose message is lost, then the only waiting lease gives up
// before its next attempt (which would claim it): the permit is given back
// once its entry has left the line, not held by nobody for its TTL.
func TestSemaphoreLostGrantGivenBackWhenWaitEnds(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		// A poll of 3s: the waiter gives up before it would claim.
		wr := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3*time.Second))
		wr.LoseGrants(1)
		waiter := semaphore(t, wr, "k", 1)
		listenTurns(t, b, wr, waiter)
		ctx, cancel := context.WithCancel(bg(t))
		got := acquirePermit(ctx, waiter, 20*time.Second)
		waitRecord(t, b, pfx, holder.Key())
		mustNil(t, a.Release(bg(t)))
		cancel()
		if le := recvWithin(t, got, 5*time.Second, "the waiter, given up"); le != nil {
			t.Fatal("the waiter got a lease: its grant's message was not lost")
		}
		waitGivenBack(t, b, pfx, 2*time.Second)
	})
}

// A claim (ARGV[19]) never shortens the granted permit's expiry: if the
// grant message came meanwhile, the spare it made keeps the record's longer
// validity, and a lease that takes it without renewal (another spare taken
// first by the claimer) must not outlive its permit.
func TestSemaphoreClaimKeepsGrantedExpiry(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 2)
	a, err := holder.Acquire(bg(t), 0)
	mustNil(t, err)
	c := &claimHook{Client: registry.NewPoolClient(b.pool(t))}
	wr := newRegClientPrefix(t, c, pfx, append(grantee[:len(grantee):len(grantee)], registry.WithLogger(discardLogger), registry.WithRuns(0, time.Minute))...)
	wr.LoseGrants(1)
	waiter := semaphore(t, wr, "k", 2)
	l0, err := waiter.Acquire(bg(t), 20*time.Second)
	mustNil(t, err)
	listenTurns(t, b, wr, waiter)

	ctxA, cancelA := context.WithCancel(bg(t))
	gotA := acquirePermit(ctxA, waiter, 20*time.Second)
	waitRecord(t, b, pfx, holder.Key())
	gotB := acquirePermit(bg(t), waiter, time.Second)
	waitFor(t, 5*time.Second, "B waiting", func() bool { return waiter.Waiting() == 2 })
	gotC := acquirePermit(bg(t), waiter, 20*time.Second)
	waitFor(t, 5*time.Second, "C waiting", func() bool { return waiter.Waiting() == 3 })
	hook := func(claim string) {
		t.Logf("hook: claim %s; waiting %d; permits %q", claim, waiter.Waiting(), b.do(t, "ZRANGE", holder.Key(), 0, -1, "WITHSCORES"))
		mustNil(t, l0.Release(bg(t))) // a local hand-off: the first spare
		t.Logf("after l0 release: spares %q permits %q queue %q", registry.Spares(waiter), b.do(t, "ZRANGE", holder.Key(), 0, -1), b.do(t, "ZRANGE", queueKey(holder.Key(), false), 0, -1))
		i := strings.LastIndex(claim, ":g")
		seq, err := strconv.ParseUint(claim[i+2:strings.IndexByte(claim, '#')], 10, 64)
		mustNil(t, err)
		registry.Granted(waiter, seq) // the late grant message: the second spare
		t.Logf("spares %q", registry.Spares(waiter))
	}
	c.hook.Store(&hook)
	mustNil(t, a.Release(bg(t))) // grants A's record; its message is lost
	cancelA()
	if le := recvWithin(t, gotA, 5*time.Second, "A, given up"); le != nil {
		t.Fatal("A got a lease")
	}
	lb := recvWithin(t, gotB, 5*time.Second, "B")
	t.Logf("B got; permits %q now %d", b.do(t, "ZRANGE", holder.Key(), 0, -1, "WITHSCORES"), time.Now().UnixMilli())
	lc := recvWithin(t, gotC, 5*time.Second, "C")
	t.Logf("C got; permits %q now %d", b.do(t, "ZRANGE", holder.Key(), 0, -1, "WITHSCORES"), time.Now().UnixMilli())
	if lb == nil || lc == nil {
		t.Fatal("B or C failed")
	}
	time.Sleep(1500 * time.Millisecond)
	lost := func(le *registry.Lease) bool {
		select {
		case <-le.Lost():
			return true
		default:
			return false
		}
	}
	t.Logf("permits %q at %v", b.do(t, "ZRANGE", holder.Key(), 0, -1, "WITHSCORES"), time.Now().UnixMilli())
	t.Logf("B lost=%v C lost=%v zcard=%d", lost(lb), lost(lc), zcard(t, b, holder.Key()))
	other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLogger(discardLogger)), "k", 2)
	n := 0
	if !lost(lb) {
		n++
	}
	if !lost(lc) {
		n++
	}
	for range 2 {
		if _, err := other.TryAcquire(bg(t), 0); err == nil {
			n++
		}
	}
	if n > 2 {
		t.Fatalf("%d leases valid at once on a semaphore of 2", n)
	}
}

// lostAdmit loses the reply of one admitted semacquire.lua (with a grant
// record, so its token is the record's grant token) and holds back the
// give-back (semrelease.lua of that token) until the next semacquire.lua
// has run, as a flaky connection's retried release would be.
// A permit whose attempt's reply was lost is given back, and not claimed
// by the next attempt meanwhile: one lease at most holds it.
type lostAdmit struct {
	registry.Client
	armed   atomic.Bool
	token   atomic.Value
	let     chan struct{}
	claimed atomic.Bool
	next    atomic.Bool
}

func (c *lostAdmit) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "semrelease" {
		if tok, _ := c.token.Load().(string); tok != "" && args[0] == tok {
			<-c.let
		}
	}
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == "semacquire" && err == nil {
		if x, ok := v.([]any); ok && len(x) == 2 && x[0] == int64(6) {
			c.claimed.Store(true)
		}
		if tok, _ := c.token.Load().(string); tok != "" && c.next.CompareAndSwap(false, true) {
			close(c.let) // the attempt after the lost one has run
		}
		if len(args) >= 18 && args[17] != "" && c.armed.Swap(false) {
			c.token.Store(args[0].(string))
			return nil, errors.New("lockyard-test: i/o timeout")
		}
	}
	return v, err
}

func TestSemaphoreClaimAfterLostReplyNotGivenBack(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
	a, err := holder.Acquire(bg(t), 0)
	mustNil(t, err)
	c := &lostAdmit{Client: registry.NewPoolClient(b.pool(t)), let: make(chan struct{})}
	wr := newRegClientPrefix(t, c, pfx, append(grantee[:len(grantee):len(grantee)], registry.WithLogger(discardLogger))...)
	waiter := semaphore(t, wr, "k", 1)
	listenTurns(t, b, wr, waiter)
	mustNil(t, a.Release(bg(t)))
	waitFor(t, 5*time.Second, "queue empty", func() bool { return queueLen(t, b, holder.Key(), false) == 0 })
	c.armed.Store(true)
	le, err := waiter.Acquire(bg(t), 10*time.Second)
	mustNil(t, err)
	if c.claimed.Load() {
		t.Fatal("the next attempt claimed the permit of the attempt whose reply was lost, which is being given back")
	}
	waitFor(t, 5*time.Second, "the give-back run", func() bool { return c.next.Load() })
	time.Sleep(200 * time.Millisecond) // the give-back's script, released by the next attempt, runs
	other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLogger(discardLogger)), "k", 1)
	if _, err := other.TryAcquire(bg(t), 0); err == nil {
		lost := false
		select {
		case <-le.Lost():
			lost = true
		default:
		}
		t.Fatalf("the claimer's lease (lost=%v) and another registry's on a semaphore of 1", lost)
	}
}

// A waiter whose TTL is shorter than its wait in line: its grant comes
// after the record's deadline (sent + TTL) and is given back; the waiter
// is woken: it takes its turn at once, not at its poll.
func TestSemaphoreStaleGrantWakesWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, plainOpts...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		wr := newRegPrefix(t, b.pool(t), pfx, append(plainOpts[:len(plainOpts):len(plainOpts)], registry.WithLogger(discardLogger))...)
		waiter := semaphore(t, wr, "k", 1)
		got := acquirePermit(bg(t), waiter, 200*time.Millisecond)
		waitFor(t, 5*time.Second, "in line, listening", func() bool { return queueLen(t, b, holder.Key(), false) == 1 && wr.TurnsSubscribed() })
		// the subscription wakes the waiter once: its next attempt records a grant
		waitRecord(t, b, pfx, holder.Key())
		time.Sleep(400 * time.Millisecond) // longer than its TTL, shorter than its poll (3s)
		released := time.Now()
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the waiter got the permit %v after the release (poll 3s): its turn was a stale grant, given back", d)
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// claimHook runs before a semacquire.lua that carries a claim.
type claimHook struct {
	registry.Client
	hook      atomic.Pointer[func(claim string)]
	failRenew atomic.Bool
}

func (c *claimHook) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "semrenew" && c.failRenew.Swap(false) {
		return nil, errors.New("lockyard-test: i/o timeout")
	}
	if s.Name() == "semacquire" && len(args) >= 19 && args[18] != "" {
		if f := c.hook.Swap(nil); f != nil {
			(*f)(args[18].(string))
			ctx = context.WithoutCancel(ctx)
		}
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A grant message for a number an attempt got already (a claim that came
// first) leaves that permit to the attempt's leases, even while its hold
// is retired for a pass or a release: giving it back then made a release
// or a ReleaseAfter find its permit gone (ErrLockLost), and a pass keep a
// permit for its next lease that Redis no longer held.
func TestSemaphoreGrantAfterClaimLeavesPermit(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := semaphore(t, newReg(t, b.pool(t), grantee...), "k", 1)
		token, again := registry.GotThenGrantedAgain(s)
		b.do(t, "ZADD", s.Key(), time.Now().Add(time.Minute).UnixMilli(), token)
		again()
		time.Sleep(300 * time.Millisecond) // a give-back runs in the background at once
		if v := b.do(t, "ZSCORE", s.Key(), token); v == nil {
			t.Fatal("the permit an attempt got was given back by a grant message of its number")
		}
	})
}

// A waiter that gives up while its entry is still in line (its leave not
// yet run) and is then granted a permit whose message is lost: the permit
// is given back after the entry has left, not before the grant (when there
// was nothing to give back) and then held by nobody for its TTL.
func TestSemaphoreGrantBeforeLeaveGivenBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		c := &heldLeave{Client: registry.NewPoolClient(b.pool(t)), let: make(chan struct{})}
		wr := newRegClientPrefix(t, c, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3*time.Second))
		wr.LoseGrants(1)
		waiter := semaphore(t, wr, "k", 1)
		listenTurns(t, nil, wr, waiter) // its leave waits for let
		ctx, cancel := context.WithCancel(bg(t))
		got := acquirePermit(ctx, waiter, 20*time.Second)
		waitFor(t, 5*time.Second, "the waiter's grant record in line", func() bool { return c.acquire.Load() >= 2 })
		waitRecord(t, b, pfx, holder.Key())
		cancel()
		if le := recvWithin(t, got, 5*time.Second, "the waiter, given up"); le != nil {
			t.Fatal("the waiter got a lease")
		}
		waitFor(t, 5*time.Second, "its leaves held back", func() bool { return c.waiting.Load() >= 2 })
		mustNil(t, a.Release(bg(t))) // grants an entry of the waiter's; the message is lost
		close(c.let)
		waitGivenBack(t, b, pfx, 3*time.Second)
	})
}

// waitGivenBack waits up to d until another registry's TryAcquire takes the
// one permit of semaphore "k" under pfx (and gives it back): the permit
// granted to a waiter that gave up was given back, not held by nobody.
func waitGivenBack(t *testing.T, b *backend, pfx string, d time.Duration) {
	t.Helper()
	other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLogger(discardLogger)), "k", 1)
	waitFor(t, d, "the permit granted to the waiter that gave up given back", func() bool {
		le, err := other.TryAcquire(bg(t), 0)
		if err == nil {
			mustNil(t, le.Release(bg(t)))
		}
		return err == nil
	})
}

// A grant valid for less than two thirds of its TTL by the registry's
// count (the attempt that recorded it was sent long before: the holder
// kept the permit 850ms of the waiter's 1s TTL, the waiter's poll 5s) is
// left to the next attempt's claim, woken at once: the lease gets a TTL
// from then. Made a spare as it came, its auto-renewed lease had 150ms
// left, less than the watchdog's first renewal, and was lost at once
// while Redis held the permit.
func TestSemaphoreGrantNearlyExpiredClaimed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second), registry.WithAutoRenew()}
		pfx := prefix(t)
		hs := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		a, err := hs.Acquire(bg(t), 0)
		mustNil(t, err)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		ws := semaphore(t, r, "k", 1)
		listenTurns(t, b, r, ws)
		const ttl = time.Second
		got := make(chan *registry.Lease, 1)
		go func() {
			le, _ := ws.Acquire(bg(t), ttl)
			got <- le
		}()
		waitRecord(t, b, pfx, ws.Key())
		time.Sleep(850 * time.Millisecond) // the time under test: between the waiter's attempt and its grant
		freshAfterGrant(t, r, a, got, ttl)
		if n := zcard(t, b, ws.Key()); n != 0 {
			t.Fatalf("%d permits held after the release", n)
		}
	})
}

// The give-back of a lost grant's permit, when the waiter gives up, does
// not depend on its leave: a leave that fails still gives the permit back
// (a grant that comes later, to the entry left in line, is given back
// too).
func TestSemaphoreLostGrantGivenBackWhenLeaveFails(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		wr := newRegClientPrefix(t, &noLeaveClient{Client: registry.NewPoolClient(b.pool(t))}, pfx,
			registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3*time.Second), registry.WithLogger(discardLogger))
		wr.LoseGrants(1)
		waiter := semaphore(t, wr, "k", 1)
		listenTurns(t, nil, wr, waiter)
		w := wire.Layout{Registry: pfx}
		b.do(t, "DEL", w.QueueKey(holder.Key()), w.WaitersKey(holder.Key())) // the first wait's entry and record, which its leave left
		ctx, cancel := context.WithCancel(bg(t))
		got := acquirePermit(ctx, waiter, 20*time.Second)
		waitRecord(t, b, pfx, holder.Key())
		mustNil(t, a.Release(bg(t)))
		waitFor(t, 5*time.Second, "the waiter's grant", func() bool { return zcard(t, b, holder.Key()) == 1 })
		cancel()
		if le := recvWithin(t, got, 5*time.Second, "the waiter, given up"); le != nil {
			t.Fatal("the waiter got a lease: its grant's message was not lost")
		}
		waitFor(t, 3*time.Second, "the permit granted to the waiter that gave up given back", func() bool { return zcard(t, b, holder.Key()) == 0 })
	})
}

// A registry that subscribes to every registry's turns (the fallback of an
// ACL that refuses its own pattern) hears no probe: the entry of a
// registry that died is told its turn, not granted a permit, which would
// be held by nobody until its record's TTL.
func TestSemaphoreNoGrantForWideSubscriber(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		psubscribed(t, b, w.AllTurnsPattern())
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		lk := holder.Key()
		id := "gone/1"
		in := fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())
		b.do(t, "ZADD", w.QueueKey(lk), 1, id)
		b.do(t, "HSET", w.WaitersKey(lk), id, "l "+in+" "+in, id+"|", "gone:g #1 60000 1 0 100 0")
		mustNil(t, a.Release(bg(t)))
		if n := zcard(t, b, lk); n != 0 {
			t.Fatalf("%d permits held: the dead waiter was granted one", n)
		}
	})
}

// gateRecord holds the reply of the first semacquire.lua that carries a
// grant record (ARGV[18]) until gate closes (the script itself runs at
// once), and refuses PSubscribe while down is set (subDownClient).
type gateRecord struct {
	subDownClient
	armed atomic.Bool
	fired atomic.Bool
	ran   chan struct{}
	gate  chan struct{}
}

func (c *gateRecord) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	v, err := c.Client.Eval(ctx, s, keys, args)
	if s.Name() == "semacquire" && c.armed.Load() && len(args) >= 18 {
		if rec, _ := args[17].(string); rec != "" && c.fired.CompareAndSwap(false, true) {
			close(c.ran)
			<-c.gate
		}
	}
	return v, err
}

// A grant left to the next attempt's claim (too little validity left) is
// not held by nobody when the head gets a permit otherwise: its attempt,
// sent while the turn subscription is down (the instance asks for no
// grants), still claims it; and the last lease to end gives back one left
// unclaimed.
func TestSemaphoreGrantLeftToClaimNotOrphaned(t *testing.T) {
	b := realBackend()
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	pfx := prefix(t)
	hs := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 2)
	a1, err := hs.Acquire(bg(t), 0)
	mustNil(t, err)
	a2, err := hs.Acquire(bg(t), 0)
	mustNil(t, err)
	c := &gateRecord{subDownClient: subDownClient{Client: registry.NewPoolClient(b.pool(t))}, ran: make(chan struct{}), gate: make(chan struct{})}
	r := newRegClientPrefix(t, c, pfx, opts...)
	ws := semaphore(t, r, "k", 2)
	listenTurns(t, b, r, ws)
	c.armed.Store(true)
	const ttl = 3 * time.Second
	got := acquirePermit(bg(t), ws, ttl)
	recvWithin(t, c.ran, 5*time.Second, "the recording attempt")
	time.Sleep(1500 * time.Millisecond) // the time under test: the record ages past a third of its TTL
	mustNil(t, a1.Release(bg(t)))       // grants it: too late, left to the next attempt's claim
	waitFor(t, 5*time.Second, "the grant", func() bool { return zcard(t, b, ws.Key()) == 2 })
	c.down.Store(true) // the turn subscription breaks
	b.do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	waitFor(t, 5*time.Second, "the subscription down", func() bool { return !r.TurnsSubscribed() })
	mustNil(t, a2.Release(bg(t))) // another permit frees
	close(c.gate)
	le := leaseWithin(t, got, 5*time.Second, "the head")
	mustNil(t, le.Release(bg(t)))
	c.down.Store(false)
	waitFor(t, 3*time.Second, "every permit free after every lease was released", func() bool { return zcard(t, b, ws.Key()) == 0 })
}

// freshAfterGrant releases a, whose release grants the waiter whose lease
// comes on got (TTL ttl, auto-renewed), and fails unless that lease is
// valid for two thirds of ttl and not lost within 500ms (the watchdog's
// first renewal comes a third of ttl after it was got); then releases it.
func freshAfterGrant(t *testing.T, r *registry.Registry, a *registry.Lease, got <-chan *registry.Lease, ttl time.Duration) {
	t.Helper()
	mustNil(t, a.Release(bg(t)))
	le := recvWithin(t, got, 3*time.Second, "the waiter, granted")
	if le == nil {
		t.Fatal("the waiter's acquisition failed")
	}
	if left := r.ValidFor(le); left < ttl*2/3 {
		t.Fatalf("the lease is valid %v more, from a TTL of %v", left, ttl)
	}
	select {
	case <-le.Lost():
		t.Fatalf("the lease, acquired just now with TTL %v and auto-renewed, was lost within 500ms", ttl)
	case <-time.After(500 * time.Millisecond):
	}
	mustNil(t, le.Release(bg(t)))
}
