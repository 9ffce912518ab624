package registry_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/redistest"

	"github.com/lockyard/lockyard/registry"
)

// serverAfter polls until the server's clock is d past now (its own, as
// the scripts read it).
func serverAfter(t *testing.T, b *backend, d time.Duration) {
	t.Helper()
	end := serverMillis(t, b) + d.Milliseconds()
	waitFor(t, 5*time.Second, "the server's clock", func() bool { return serverMillis(t, b) >= end })
}

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

// wait starts w's LockContext and returns once the wait marker has n
// entries (w's among them).
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
	marker := "{" + w.l.Key() + "}:wait"
	waitFor(t, 5*time.Second, "a waiter to queue", func() bool {
		v, _ := redis.String(redistest.Do(b.addr, "GET", marker))
		return len(strings.Fields(v)) == n
	})
}

// The wait marker queues registries. A free lock goes to whoever tries
// first, unless a waiting PubSubLock registry has waited longer than
// fairAfter: then it is reserved for the oldest such, and another
// registry's try is refused, even though the key is free, until that one
// has it. So the registry whose subscriber the server notifies last does
// not lose every race (bench scenario 3). A TryLock queues (the holder's
// registry then stops passing the lock locally) but reserves nothing.
func TestWaitQueueOrder(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, aged := range []bool{false, true} {
			fair := time.Hour // nobody ages
			if aged {
				fair = time.Millisecond
			}
			pfx := prefix(t)
			opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second),
				registry.WithFairAfter(fair)}
			holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
			mustNil(t, holder.LockContext(bg(t)))
			tryer := obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
			mustIs(t, tryer.TryLockContext(bg(t)), registry.ErrNotObtained) // queued first
			var ws [3]*queued
			got := make(chan int, len(ws))
			for i := range ws {
				ws[i] = &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k"), got: got}
				ws[i].wait(t, b, i, i+2)
			}
			serverAfter(t, b, 2*time.Millisecond)
			// Free the key without a release message: the waiters sleep on
			// (10s), and only the test's tries run.
			b.do(t, "DEL", holder.Key())
			if aged {
				mustIs(t, tryer.TryLockContext(bg(t)), registry.ErrNotObtained) // the oldest waiter's turn
			} else {
				mustNil(t, tryer.TryLockContext(bg(t))) // nobody's turn: the first to try
				mustNil(t, tryer.UnlockContext(bg(t)))
			}
			b.do(t, "PUBLISH", pfx+"-channel:"+holder.Key(), holder.Key()) // wakes them
			seen := map[int]bool{}
			for turn := range ws {
				i := recvWithin(t, got, 10*time.Second, "a waiter's turn")
				if aged && i != turn {
					t.Fatalf("turn %d went to waiter %d, want the waiters in the order they queued", turn, i)
				}
				seen[i] = true
				ws[i].finish(t)
			}
			if len(seen) != len(ws) {
				t.Fatalf("turns went to %v", seen)
			}
			// The waiters left the queue as they got the lock; the tryer
			// did too if it got it.
			v, _ := redis.String(redistest.Do(b.addr, "GET", "{"+holder.Key()+"}:wait"))
			if q := strings.Fields(v); aged && (len(q) != 1 || !strings.Contains(q[0], "!")) || !aged && len(q) != 0 {
				t.Fatalf("aged %v: the wait marker is %q after every waiter's turn", aged, v)
			}
		}
	})
}

// serverMillis returns the server's clock in ms, as the scripts read it.
func serverMillis(t *testing.T, b *backend) int64 {
	v := b.do(t, "TIME").([]any)
	s, _ := strconv.ParseInt(string(v[0].([]byte)), 10, 64)
	us, _ := strconv.ParseInt(string(v[1].([]byte)), 10, 64)
	return s*1000 + us/1000
}

// A waiter that gives up takes its registry out of the queue at once
// (leave.lua), so a free key is not kept for its turn; the entry of a
// registry that vanished without leaving lapses when it would have been
// renewed (here after 300ms).
func TestWaitQueueLeave(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithIdleBetweenTries(2 * time.Second), registry.WithFairAfter(time.Millisecond),
			registry.WithLockType(registry.PubSubLock)}
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		marker := "{" + holder.Key() + "}:wait"
		gone := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
		gone.wait(t, b, 0, 1)
		next := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")}
		next.wait(t, b, 1, 2)
		gone.cancel()
		recvWithin(t, gone.done, 5*time.Second, "the gone waiter to return")
		waitFor(t, 5*time.Second, "the gone waiter's registry to leave the queue", func() bool {
			v, _ := redis.String(redistest.Do(b.addr, "GET", marker))
			return len(strings.Fields(v)) == 1
		})
		serverAfter(t, b, 2*time.Millisecond)
		released := time.Now()
		mustNil(t, holder.UnlockContext(bg(t))) // wakes next
		recvWithin(t, next.got, 5*time.Second, "the next waiter's turn")
		if d := time.Since(released); d > time.Second { // the gone entry would have lapsed after 4s
			t.Fatalf("the next waiter got the lock %v after the release", d)
		}
		next.finish(t)

		// A registry that vanished: its aged entry keeps the key until it
		// lapses.
		mustNil(t, holder.LockContext(bg(t)))
		next = &queued{l: next.l}
		next.wait(t, b, 1, 1)
		now := serverMillis(t, b)
		v, _ := redis.String(redistest.Do(b.addr, "GET", marker))
		b.do(t, "SET", marker, fmt.Sprintf("vanished=%d/%d %s", now+300, now-1000, v), "PX", 5000)
		released = time.Now()
		mustNil(t, holder.UnlockContext(bg(t)))
		recvWithin(t, next.got, 5*time.Second, "the next waiter's turn")
		if d := time.Since(released); d < 250*time.Millisecond {
			t.Fatalf("the next waiter got the lock %v after the release, before the vanished registry's entry lapsed", d)
		}
		next.finish(t)
	})
}

// A SpinLock waiter (a poller) takes its turn among PubSubLock waiters, in
// the order they came; while only pollers wait, nothing is reserved.
func TestWaitQueuePollers(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		idle := 50 * time.Millisecond
		opts := []registry.Option{registry.WithIdleBetweenTries(idle), registry.WithFairAfter(time.Millisecond)}
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		got := make(chan int, 2)
		spin := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k"), got: got}
		spin.wait(t, b, 0, 1)
		pub := &queued{l: obtain(t, newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithLockType(registry.PubSubLock))...), "k"), got: got}
		pub.wait(t, b, 1, 2)
		serverAfter(t, b, 2*time.Millisecond)
		mustNil(t, holder.UnlockContext(bg(t))) // wakes the PubSubLock waiter at once; the poller comes later
		if i := recvWithin(t, got, 5*time.Second, "a turn"); i != 0 {
			t.Fatal("the PubSubLock waiter took the turn of the poller that came first")
		}
		spin.finish(t)
		if i := recvWithin(t, got, 5*time.Second, "a turn"); i != 1 {
			t.Fatalf("turn to waiter %d", i)
		}
		pub.finish(t)

		// Only pollers: a try by a registry that did not wait gets the
		// free key.
		mustNil(t, holder.LockContext(bg(t)))
		spin = &queued{l: spin.l}
		spin.wait(t, b, 0, 1)
		tryer := obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		mustIs(t, tryer.TryLockContext(bg(t)), registry.ErrNotObtained)
		serverAfter(t, b, 2*time.Millisecond)
		b.do(t, "DEL", holder.Key()) // no release message
		mustNil(t, tryer.TryLockContext(bg(t)))
		mustNil(t, tryer.UnlockContext(bg(t)))
		recvWithin(t, spin.got, 5*time.Second, "the poller's turn")
		spin.finish(t)
	})
}

// A wait marker as lockyard wrote it before the queue, a bare registry id,
// still counts as another registry waiting: the pass releases the key (the
// next local goroutine obtains it anew, with a new value), and the bare id
// reserves nothing.
func TestWaitMarkerBareID(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t), registry.WithFencing()), "k") // every hand-off runs pass.lua
		h0 := mustHold(t, l)
		before, err := redis.String(b.do(t, "GET", l.Key()), nil)
		mustNil(t, err)
		b.do(t, "SET", "{"+l.Key()+"}:wait", "an-older-registry", "PX", 5000)
		got := queue(t, l, 1, func() string { v, _ := redis.String(redistest.Do(b.addr, "GET", l.Key())); return v })
		mustNil(t, h0.unlock())
		g := recvWithin(t, got, 5*time.Second, "the local goroutine's turn")
		if g[1] == before {
			t.Fatalf("the key kept its value %q: the pass kept it for the local goroutine despite the older registry's marker", before)
		}
	})
}
