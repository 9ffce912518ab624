package registry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// queued is a waiter of its own registry, in LockContext in a goroutine:
// got (which waiters may share) receives its index once it holds the lock;
// it unlocks when release is closed.
type queued struct {
	l       *registry.RedisLock
	got     chan int
	release chan struct{}
	done    chan struct{} // closed when the goroutine returns
	cancel  context.CancelFunc
}

// finish lets w unlock and waits for it.
func (w *queued) finish(t *testing.T) {
	t.Helper()
	close(w.release)
	recvWithin(t, w.done, 5*time.Second, "the waiter's unlock")
}

// wait starts w's LockContext and returns once n waiters are queued for
// the key (w among them).
func (w *queued) wait(t *testing.T, b *backend, i, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	w.cancel, w.release, w.done = cancel, make(chan struct{}), make(chan struct{})
	if w.got == nil {
		w.got = make(chan int, 1)
	}
	t.Cleanup(cancel)
	go func() {
		defer close(w.done)
		if w.l.LockContext(ctx) != nil {
			return
		}
		w.got <- i
		<-w.release
		w.l.Unlock()
	}()
	waitQueued(t, b, w.l, n)
}

// loopers run Lock; section; Unlock on one lock in n goroutines until
// stopped, and count their acquisitions.
type loopers struct {
	n    atomic.Int64
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func startLoopers(t *testing.T, l *registry.RedisLock, n int, section time.Duration) *loopers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lp := &loopers{stop: cancel}
	for range n {
		lp.wg.Add(1)
		go func() {
			defer lp.wg.Done()
			for ctx.Err() == nil {
				if l.LockContext(ctx) != nil {
					continue
				}
				lp.n.Add(1)
				time.Sleep(section) // the work of the critical section
				l.Unlock()
			}
		}()
	}
	t.Cleanup(lp.halt)
	waitFor(t, 5*time.Second, "the loopers' first acquisition", func() bool { return lp.n.Load() > 0 })
	return lp
}

func (lp *loopers) halt() { lp.stop(); lp.wg.Wait() }

// spring is a client of Spring's RedisLockRegistry on the wire: its obtain
// script and its unlock (which publishes only for PUB_SUB_LOCK), and no
// entry in lockyard's wait queue. A SPIN waiter polls; a PUB_SUB waiter
// waits for a release message naming its key.
type spring struct {
	pool          *redis.Pool
	addr          string // for the subscription's own connection
	key, clientID string
	pubsub        bool
}

const springObtain = `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1
elseif not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`

const springUnlock = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], KEYS[1]) end
end`

// listen subscribes as a Spring PUB_SUB registry does, on a connection of
// its own, until the test ends; the channel receives a notice for each
// release message naming the key.
func (s *spring) listen(t *testing.T, prefix string) <-chan struct{} {
	t.Helper()
	sc, err := redis.Dial("tcp", s.addr) // not pooled: closing it ends the receiver
	mustNil(t, err)
	t.Cleanup(func() { sc.Close() })
	psc := redis.PubSubConn{Conn: sc}
	mustNil(t, psc.PSubscribe(prefix+"-channel:*"))
	msgs := make(chan struct{}, 1)
	go func() {
		for {
			switch m := psc.Receive().(type) {
			case redis.Message:
				if string(m.Data) == s.key {
					select {
					case msgs <- struct{}{}:
					default:
					}
				}
			case error:
				return
			}
		}
	}()
	return msgs
}

// lockWithin takes the key as Spring would, within d, holds it briefly and
// lets it go: it reports whether it got it. msgs are the release messages
// (listen) of a PUB_SUB client; a SPIN client polls every 20ms.
func (s *spring) lockWithin(t *testing.T, d time.Duration, prefix string, msgs <-chan struct{}) bool {
	t.Helper()
	c := s.pool.Get()
	defer c.Close()
	for end := time.Now().Add(d); time.Now().Before(end); {
		ok, err := redis.Int(c.Do("EVAL", springObtain, 1, s.key, s.clientID, 60000))
		mustNil(t, err)
		if ok == 1 {
			time.Sleep(200 * time.Microsecond) // the work of the critical section
			channel := ""                      // SPIN_LOCK publishes nothing
			if s.pubsub {
				channel = prefix + "-channel:" + s.key
			}
			_, err := c.Do("EVAL", springUnlock, 1, s.key, s.clientID, channel)
			mustNil(t, err)
			return true
		}
		if s.pubsub {
			select {
			case <-msgs:
			case <-time.After(time.Until(end)):
			}
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return false
}

// Finding: a busy registry starved every client that writes no queue
// entry. A run of local holds now ends after chainSpan whatever the queue
// says: the key is released and the release published, and the next local
// goroutine waits a moment. A Spring PUB_SUB client, told by the message,
// and a Spring SPIN client, polling, both get the key beside a registry
// whose 3 goroutines lock it in a loop.
func TestClientsWithoutQueueGetTurns(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, pubsub := range []bool{true, false} {
			pfx := prefix(t)
			l := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
			lp := startLoopers(t, l, 3, 200*time.Microsecond)
			s := &spring{pool: b.pool(t), addr: b.addr, key: l.Key(), clientID: "spring-" + pfx, pubsub: pubsub}
			var msgs <-chan struct{}
			if pubsub {
				msgs = s.listen(t, pfx)
			}
			for i := range 3 {
				if !s.lockWithin(t, 5*time.Second, pfx, msgs) {
					t.Fatalf("pubsub %v: the Spring client's acquisition %d did not come within 5s, beside a busy registry", pubsub, i+1)
				}
			}
			lp.halt()
		}
	})
}

// Finding: a lock instance kept by its caller after ExpireUnusedOlderThan
// evicted it shared its registry's id with the instance Obtain returns next,
// and locked it out. Each instance now waits in the queue under an id of
// its own, so the fresh one gets turns beside 3 goroutines on the evicted
// one (which, no longer cached, hears no release message and polls). Runs
// of local holds are not bounded here: the queue alone gives the turns.
func TestEvictedInstanceTakesTurns(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newReg(t, b.pool(t), registry.WithLockType(registry.PubSubLock), registry.WithRuns(0, time.Hour))
		old := obtain(t, r, "k")
		r.ExpireUnusedOlderThan(-1)
		fresh := obtain(t, r, "k")
		if fresh == old || fresh.WaiterID() == old.WaiterID() {
			t.Fatalf("the fresh instance %s is the evicted one %s", fresh.WaiterID(), old.WaiterID())
		}
		lp := startLoopers(t, old, 3, 200*time.Microsecond)
		for i := range 3 {
			ctx, cancel := context.WithTimeout(bg(t), 5*time.Second)
			err := fresh.LockContext(ctx)
			cancel()
			if err != nil {
				t.Fatalf("the fresh instance's acquisition %d beside the evicted one: %v", i+1, err)
			}
			mustNil(t, fresh.UnlockContext(bg(t)))
		}
		n := lp.n.Load()
		waitFor(t, 5*time.Second, "the evicted instance to go on", func() bool { return lp.n.Load() > n })
	})
}

// Finding: every release woke every waiting registry, and each ran the
// obtain script (O(n) scripts per release). A waiter now counts the
// release messages until its own turn (the listeners ahead of it): 12
// waiting registries, one release: at most a few of them try.
func TestReleaseWakesFew(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		const n = 12
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		var ws [n]*queued
		got := make(chan int, n)
		for i := range ws {
			r := newRegPrefix(t, cp, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))
			ws[i] = &queued{l: obtain(t, r, "k"), got: got}
			ws[i].wait(t, b, i, i+1)
		}
		notWithin(t, got, 100*time.Millisecond, "the lock held") // the waiters settle
		cp.Commands()
		mustNil(t, holder.UnlockContext(bg(t)))
		if i := recvWithin(t, got, 5*time.Second, "the first waiter's turn"); i != 0 {
			t.Fatalf("the turn went to waiter %d, want the first in line", i)
		}
		notWithin(t, got, 100*time.Millisecond, "the first waiter's hold")
		tries := 0
		for _, c := range cp.Commands() {
			if c == "EVALSHA" || c == "EVAL" {
				tries++
			}
		}
		if tries > 3 {
			t.Fatalf("one release made %d of %d waiting registries try, want at most 3", tries, n)
		}
		for i := range ws { // and every one gets its turn, in order
			if i > 0 {
				if j := recvWithin(t, got, 5*time.Second, "a turn"); j != i {
					t.Fatalf("turn %d went to waiter %d", i, j)
				}
			}
			ws[i].finish(t)
		}
	})
}

// Finding: a free key was kept for a waiter that nobody told it was free.
// A lease's ReleaseAfter now tells the waiters once its key has expired
// (nudge.lua), so a waiter that polls every 10s gets it at once; and a
// poller at the head of the queue whose next try is far off is passed over,
// so the listener behind it gets a released key at once, and the poller
// gets its turn when it is due.
func TestFreeKeyNotKeptForTheUntold(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx)
		lease, err := r.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		w := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(10*time.Second)), "k")}
		w.wait(t, b, 0, 1)
		start := time.Now()
		mustNil(t, lease.ReleaseAfter(bg(t), 50*time.Millisecond))
		if b.mr != nil {
			b.mr.FastForward(50 * time.Millisecond) // miniredis expires keys by its own clock
		}
		recvWithin(t, w.got, 5*time.Second, "the waiter's turn after ReleaseAfter")
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the waiter got the key %v after ReleaseAfter(50ms): it was not told", d)
		}
		w.finish(t)

		holder := obtain(t, r, "k")
		mustNil(t, holder.LockContext(bg(t)))
		poller := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(3*time.Second)), "k")}
		poller.got = make(chan int, 2)
		poller.wait(t, b, 1, 1)
		w = &queued{l: w.l, got: poller.got}
		w.wait(t, b, 2, 2)
		start = time.Now()
		mustNil(t, holder.UnlockContext(bg(t)))
		if i := recvWithin(t, poller.got, 5*time.Second, "a turn"); i != 2 || time.Since(start) > 2*time.Second {
			t.Fatalf("after the release, waiter %d got the key in %v; want the listener behind the poller, at once", i, time.Since(start))
		}
		w.finish(t)
		recvWithin(t, poller.got, 10*time.Second, "the poller's turn")
		poller.finish(t)
	})
}

// Finding: one failed TryLock idled a busy key for a poll interval: it
// queued, and the holder's registry released the key for it. A TryLock
// now never queues: the busy registry goes on passing the key among its
// goroutines (the value stays the same within a run of holds).
func TestTryLockDoesNotQueue(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		busy := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithRuns(time.Hour, time.Hour)), "k")
		h0 := mustHold(t, busy)
		// A PubSubLock registry: were it queued, it would be given turns.
		tryer := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
		for range 3 { // the plain SET, then the script
			mustIs(t, tryer.TryLockContext(bg(t)), registry.ErrNotObtained)
		}
		if n := queueLen(t, b, busy.Key(), false); n != 0 {
			t.Fatalf("%d waiters queued after TryLocks", n)
		}
		token := b.do(t, "GET", busy.Key())
		got := queue(t, busy, 10, func() any { v, _ := redistest.Do(b.addr, "GET", busy.Key()); return v })
		mustNil(t, h0.unlock())
		for range 10 {
			g := recvWithin(t, got, 5*time.Second, "a local hold")
			if v, _ := redis.String(g[1], nil); v != string(token.([]byte)) {
				t.Fatalf("the key holds %q within a run of local holds, want %q: the busy registry let it go for a TryLock", v, token)
			}
		}
	})
}

// Finding: a SpinLock waiter starved among fast PubSubLock registries. A
// poller now gets the turn when it is due soon: beside two registries of
// two goroutines each locking in a loop, a SpinLock registry polling
// every 50ms gets the key within a second, again and again.
func TestPollerAmongListeners(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		for range 2 {
			l := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
			startLoopers(t, l, 2, time.Millisecond)
		}
		poller := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(50*time.Millisecond)), "k")
		for i := range 5 {
			start := time.Now()
			ctx, cancel := context.WithTimeout(bg(t), 5*time.Second)
			err := poller.LockContext(ctx)
			cancel()
			if err != nil {
				t.Fatalf("the poller's acquisition %d: %v", i+1, err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("the poller's acquisition %d took %v", i+1, d)
			}
			mustNil(t, poller.UnlockContext(bg(t)))
		}
	})
}

// A waiter that gives up leaves the queue at once (leave.lua), and the
// next one moves up; a waiter that died without leaving loses its turn
// when it does not take it, and the key goes to the next.
func TestWaitQueueLeave(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithIdleBetweenTries(time.Second), registry.WithLockType(registry.PubSubLock)}
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		gone := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
		gone.wait(t, b, 0, 1)
		next := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
		next.wait(t, b, 1, 2)
		gone.cancel()
		recvWithin(t, gone.done, 5*time.Second, "the gone waiter to return")
		waitQueued(t, b, holder, 1)
		released := time.Now()
		mustNil(t, holder.UnlockContext(bg(t)))
		recvWithin(t, next.got, 5*time.Second, "the next waiter's turn")
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Fatalf("the next waiter got the lock %v after the release", d)
		}
		next.finish(t)

		// A waiter that vanished: its turn lapses untaken, it is dropped,
		// and the next waiter gets the key by its next try at the latest
		// (here a second).
		mustNil(t, holder.LockContext(bg(t)))
		qk := queueKey(holder.Key(), false)
		wk := strings.TrimSuffix(qk, ":queue") + ":waiters"
		now := serverMillis(t, b)
		b.do(t, "ZADD", qk, now-1000, "vanished/1")
		b.do(t, "HSET", wk, "vanished/1", fmt.Sprintf("l %d %d", now+60000, now+120000))
		next = &queued{l: next.l}
		next.wait(t, b, 1, 2)
		released = time.Now()
		mustNil(t, holder.UnlockContext(bg(t)))
		if b.mr != nil {
			// miniredis lets keys expire only by FastForward: TTLs are made
			// to run as the server's clock (real time) does, 10ms a poll, so
			// that a turn kept for the vanished waiter again (a try within
			// its turn's window) lapses too.
			waitFor(t, 5*time.Second, "the vanished waiter's turn", func() bool { return b.mr.Exists(strings.TrimSuffix(qk, ":queue") + ":turn") })
			waitFor(t, 5*time.Second, "the next waiter's turn", func() bool {
				b.mr.FastForward(10 * time.Millisecond)
				select {
				case <-next.got:
					return true
				default:
					return false
				}
			})
		} else {
			recvWithin(t, next.got, 5*time.Second, "the next waiter's turn")
		}
		if d := time.Since(released); d > 3*time.Second {
			t.Fatalf("the next waiter got the lock %v after the release", d)
		}
		next.finish(t)
		if n := queueLen(t, b, holder.Key(), false); n != 0 {
			t.Fatalf("%d entries left in the queue (the vanished waiter's?)", n)
		}
	})
}

// serverMillis returns the server's clock in ms, as the scripts read it.
func serverMillis(t *testing.T, b *backend) int64 {
	v := b.do(t, "TIME").([]any)
	var s, us int64
	fmt.Sscan(string(v[0].([]byte)), &s)
	fmt.Sscan(string(v[1].([]byte)), &us)
	return s*1000 + us/1000
}

// The queue and its keys under faults: deleted, made another type, filled
// with garbage. Waiters still get the key, in the end, and no error
// reaches them.
func TestWaitQueueFaults(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(100 * time.Millisecond)}
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		qk := queueKey(holder.Key(), false)
		side := strings.TrimSuffix(qk, ":queue")
		retype := func(key, cmd string, args ...any) { // atomic: the waiter may write the key meanwhile
			b.do(t, "EVAL", append([]any{"redis.call('DEL', KEYS[1]) return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))", 1, key, cmd}, args...)...)
		}
		for _, fault := range []func(){
			func() { b.do(t, "DEL", qk, side+":waiters", side+":turn", side+":polls") },
			func() { retype(qk, "SET", "a string") },
			func() { retype(side+":waiters", "LPUSH", "a list") },
			func() { retype(side+":polls", "SET", "a string") },
			func() { retype(side+":turn", "HSET", "f", "v") },
			func() {
				b.do(t, "ZADD", qk, 0, "garbage", 1, "more")
				b.do(t, "HSET", side+":waiters", "garbage", "x y z")
			},
		} {
			mustNil(t, holder.LockContext(bg(t)))
			w := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
			w.wait(t, b, 0, 1)
			fault()
			mustNil(t, holder.UnlockContext(bg(t)))
			recvWithin(t, w.got, 5*time.Second, "the waiter's turn despite the fault")
			w.finish(t)
		}
	})
}

// A pass that releases the key for another registry's turn queues the
// holder's next local goroutine; it is woken by the release that ends that
// turn, even if its registry never failed an attempt before (its pub/sub
// subscriber starts then), not by its poll (here 10s).
func TestQueuedByPassIsWoken(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
		l := obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		h0 := mustHold(t, l) // a TryLock that succeeds: no failed attempt, no subscriber yet
		other := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
		other.wait(t, b, 0, 1)
		got := queue(t, l, 1, func() any { return nil })
		mustNil(t, h0.unlock()) // the pass releases for other's turn
		recvWithin(t, other.got, 5*time.Second, "the other registry's turn")
		released := time.Now()
		other.finish(t)
		recvWithin(t, got, 5*time.Second, "the local goroutine's turn")
		if d := time.Since(released); d > 2*time.Second {
			t.Fatalf("the local goroutine got the key %v after the other registry's release: not woken", d)
		}
	})
}

// A key freed without a release message (a Spring SPIN_LOCK unlock, or a
// DEL) and taken by the first waiter in line by its poll: the waiters
// behind it are told that they moved up, so the next one gets its turn at
// the first waiter's release, not at its own poll (here 3s).
func TestSilentReleaseMovesUp(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k") // only for the key's name
		b.do(t, "SET", holder.Key(), "spring-holder", "PX", 60000)
		got := make(chan int, 2)
		first := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(200*time.Millisecond)), "k"), got: got}
		first.wait(t, b, 0, 1)
		second := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(3*time.Second)), "k"), got: got}
		second.wait(t, b, 1, 2)
		b.do(t, "DEL", holder.Key()) // no message: the first waiter finds it free by its poll
		if i := recvWithin(t, got, 5*time.Second, "the first waiter's poll"); i != 0 {
			t.Fatalf("waiter %d got the key first", i)
		}
		released := time.Now()
		first.finish(t)
		recvWithin(t, got, 5*time.Second, "the second waiter's turn")
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the second waiter got the key %v after the first's release: it counted one turn too many", d)
		}
		second.finish(t)
	})
}

// A waiter that vanished at the head of the queue does not stall a busy
// registry: its pass gives the vanished waiter the turn, and the local
// goroutine it queues behind tries again when that turn ends (not at its
// poll, here 2s). Real server only: miniredis ends a turn only by
// FastForward.
func TestVanishedHeadDoesNotStallPass(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	// Every hand-off runs the pass (no free pass, which would not look at
	// the queue).
	l := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(2*time.Second),
		registry.WithRuns(time.Nanosecond, 0)), "k")
	qk := queueKey(l.Key(), false)
	wk := strings.TrimSuffix(qk, ":queue") + ":waiters"
	for round := range 3 {
		h0, ok := holdIn(t, l)
		if !ok {
			t.Fatalf("round %d: TryLock of a free lock failed: queue %v, turn %v, key %v", round, b.do(t, "ZRANGE", qk, 0, -1, "WITHSCORES"),
				b.do(t, "GET", strings.TrimSuffix(qk, ":queue")+":turn"), b.do(t, "GET", l.Key()))
		}
		now := serverMillis(t, b)
		id := fmt.Sprintf("vanished/%d", round)
		b.do(t, "ZADD", qk, now-1000, id)
		b.do(t, "HSET", wk, id, fmt.Sprintf("l %d %d", now+60000, now+120000))
		got := queue(t, l, 1, func() any { return nil })
		start := time.Now()
		mustNil(t, h0.unlock()) // the pass releases for the vanished waiter's turn
		recvWithin(t, got, 5*time.Second, "the local goroutine")
		if d := time.Since(start); d > time.Second {
			t.Fatalf("round %d: the local goroutine got the key %v after the unlock", round, d)
		}
		waitFor(t, 5*time.Second, "the local goroutine's unlock", func() bool { return l.Phase() == "idle" })
	}
}

// A turn that lives for ever (PERSIST, a restore, a hand-written value)
// keeps the key for nobody: it is deleted, and the waiter gets the free
// key.
func TestTurnWithoutTTL(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		l := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithFencing()), "k") // the script, not a plain SET
		turn := strings.TrimSuffix(queueKey(l.Key(), false), ":queue") + ":turn"
		b.do(t, "SET", turn, "ghost/1")
		ctx, cancel := context.WithTimeout(bg(t), 2*time.Second)
		defer cancel()
		mustNil(t, l.LockContext(ctx))
		mustNil(t, l.UnlockContext(bg(t)))
	})
}

// scriptNames records the names of the scripts a Client runs.
type scriptNames struct {
	registry.Client
	mu    sync.Mutex
	names []string
}

func (c *scriptNames) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	c.mu.Lock()
	c.names = append(c.names, s.Name())
	c.mu.Unlock()
	return c.Client.Eval(ctx, s, keys, args)
}

// commandNames is scriptNames for a Client that also sends plain
// commands (registry.CommandClient), as the redigo Client does.
type commandNames struct {
	*scriptNames
	cmd registry.CommandClient
}

func newCommandNames(pool registry.Pool) commandNames {
	c := registry.NewPoolClient(pool)
	return commandNames{&scriptNames{Client: c}, c.(registry.CommandClient)}
}

func (c commandNames) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return c.cmd.Pipeline(ctx, cmds)
}

func (c commandNames) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	return c.cmd.PipelineOn(ctx, key, cmds)
}

// take returns the scripts run since the last call.
func (c *scriptNames) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

// releases returns the lock's release scripts run since the last call.
func (c *scriptNames) releases() []string {
	return slices.DeleteFunc(c.take(), func(n string) bool { return n != "drop" && n != "release" })
}

// An uncontended lock is released by drop.lua (two keys). One that finds
// a waiter queued all the same changes nothing and leaves the key to
// release.lua, which gives the waiter its turn; for a second after, the
// releases expect waiters (release.lua at once, though they find none),
// and then drop.lua again.
func TestDropLeavesWaitersToRelease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		c := &scriptNames{Client: registry.NewPoolClient(b.pool(t))}
		r := newRegClientPrefix(t, c, pfx, registry.WithScriptsOnly())
		l := obtain(t, r, "k")
		cycle := func() []string {
			t.Helper()
			mustNil(t, l.LockContext(bg(t)))
			mustNil(t, l.UnlockContext(bg(t)))
			return c.releases()
		}
		if got := cycle(); !slices.Equal(got, []string{"drop"}) {
			t.Fatalf("an uncontended release ran %v, want drop", got)
		}

		mustNil(t, l.LockContext(bg(t)))
		w := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(10*time.Second)), "k")}
		w.wait(t, b, 0, 1)
		found := time.Now()
		mustNil(t, l.UnlockContext(bg(t)))
		if got := c.releases(); !slices.Equal(got, []string{"drop", "release"}) {
			t.Fatalf("a release that found a waiter ran %v, want drop, then release", got)
		}
		recvWithin(t, w.got, 5*time.Second, "the waiter's turn")
		w.finish(t)

		for i := range 2 {
			if got := cycle(); time.Since(found) < 900*time.Millisecond && !slices.Equal(got, []string{"release"}) {
				t.Fatalf("release %d, %v after one found a waiter, ran %v, want release (waiters expected)", i, time.Since(found), got)
			}
		}
		waitFor(t, 5*time.Second, "a quiet release again", func() bool { return slices.Equal(cycle(), []string{"drop"}) })
		if d := time.Since(found); d < time.Second {
			t.Fatalf("a quiet release %v after one found a waiter, want a second or more", d)
		}
	})
}

// A hold whose key became another type (a list) while held is lost at its
// release, as one taken by another token is: drop.lua's WRONGTYPE is not a
// failed release.
func TestDropFindsAnotherType(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t)), "k")
		mustNil(t, l.LockContext(bg(t)))
		b.do(t, "DEL", l.Key())
		b.do(t, "RPUSH", l.Key(), "x")
		mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
		if n, _ := redis.Int(b.do(t, "LLEN", l.Key()), nil); n != 1 {
			t.Fatalf("the list has %d elements, want it left as it was", n)
		}
	})
}
