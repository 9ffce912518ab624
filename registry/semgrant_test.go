package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// grantReady returns a semaphore of 1 held by another registry's lease,
// and waiter, a semaphore of count in registry wr whose Acquire waits in
// line with its registry grantee for its turns (so that the release
// grants it the permit); got is the waiter's lease.
func grantReady(t *testing.T, b *backend, holderOpts, waiterOpts []registry.Option, count int, wr func(pfx string) *registry.Registry) (a *registry.Lease, waiter *registry.Semaphore, r *registry.Registry, got <-chan *registry.Lease) {
	t.Helper()
	pfx := prefix(t)
	holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, holderOpts...), "k", count)
	var err error
	for range count { // every permit held; a is the last
		a, err = holder.Acquire(bg(t), 0)
		mustNil(t, err)
	}
	if wr != nil {
		r = wr(pfx)
	} else {
		r = newRegPrefix(t, b.pool(t), pfx, waiterOpts...)
	}
	waiter = semaphore(t, r, "k", count)
	// A first wait starts the registry's turn subscriber; the next one
	// asks for grants.
	listenTurns(t, b, r, waiter)
	got = acquirePermit(bg(t), waiter, 0)
	waitRecord(t, b, pfx, holder.Key())
	return a, waiter, r, got
}

// waitRecord waits until a grant record is in lk's line.
func waitRecord(t *testing.T, b *backend, pfx, lk string) {
	t.Helper()
	waitFor(t, 5*time.Second, "a grant record in line", func() bool {
		m, err := redis.StringMap(b.do(t, "HGETALL", wire.Layout{Registry: pfx}.WaitersKey(lk)), nil)
		mustNil(t, err)
		for f := range m {
			if strings.HasSuffix(f, "|") {
				return true
			}
		}
		return false
	})
}

// noLeaveClient fails every leave.lua, as a network fault would.
type noLeaveClient struct{ registry.Client }

func (c *noLeaveClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "leave" {
		return nil, errors.New("lockyard-test: leave refused")
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// listenTurns makes registry r listen for its turns: a first wait of
// waiter, one of r's semaphores, starts r's turn subscriber (its later
// waits ask for grants). With b, it waits until that wait's entry has left
// the line (nobody else is in line), so that a release cannot grant it.
func listenTurns(t *testing.T, b *backend, r *registry.Registry, waiter *registry.Semaphore) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg(t), 50*time.Millisecond)
	_, err := waiter.Acquire(ctx, 0)
	cancel()
	mustIs(t, err, context.DeadlineExceeded)
	waitFor(t, 5*time.Second, "the turn subscriber", r.TurnsSubscribed)
	if b != nil {
		waitFor(t, 5*time.Second, "the first wait's entry out of line", func() bool { return queueLen(t, b, waiter.Key(), false) == 0 })
	}
}

var grantee = []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(300 * time.Millisecond)}

// A grant whose message is lost (the connection broke after the server
// counted it) is claimed by the waiter's next attempt, at its poll: the
// permit granted is the waiter's, not held by nobody for its TTL.
func TestSemaphoreLostGrantClaimed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		a, waiter, _, got := grantReady(t, b, grantee, nil, 1, func(pfx string) *registry.Registry {
			r := newRegPrefix(t, b.pool(t), pfx, grantee...)
			r.LoseGrants(1)
			return r
		})
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 3*time.Second, "the waiter, at its poll (300ms), its grant's message lost")
		if n := zcard(t, b, waiter.Key()); n != 1 {
			t.Fatalf("%d permits held, want 1 (the one granted, claimed)", n)
		}
		mustNil(t, le.Release(bg(t)))
		if n := zcard(t, b, waiter.Key()); n != 0 {
			t.Fatalf("%d permits held after the release", n)
		}
	})
}

// A waiter made with another count of permits than the script that gives
// its turn is told its turn, not granted a permit: its own attempt then
// compares the counts (ErrInvalidConfig), as before grants.
func TestSemaphoreNoGrantForAnotherCount(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		lk := w.LockKey("k")
		heardOn(t, b, pfx) // a listener of every turn channel: every probe is heard
		in := fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())
		b.do(t, "ZADD", lk, in, "P#3")
		b.do(t, "ZADD", w.QueueKey(lk), 1, "r/1")
		b.do(t, "HSET", w.WaitersKey(lk), "r/1", "l "+in+" "+in, "r/1|", "T #2 30000 5 0 100 0")
		c, err := redis.Dial("tcp", b.addr)
		mustNil(t, err)
		defer c.Close()
		_, err = c.Do("EVAL", registry.SemReleaseSource, 6, lk, w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk), w.FenceKey(lk),
			"P#3", w.TurnPrefix(), 5, 20, 2, 3, 0, 0)
		mustNil(t, err)
		if v := b.do(t, "ZSCORE", lk, "T5#2"); v != nil {
			t.Fatalf("a waiter of 2 was granted a permit by a release of a semaphore of 3")
		}
		if n := queueLen(t, b, lk, false); n != 1 {
			t.Fatalf("%d in line, want the waiter, told its turn", n)
		}
	})
}

// A fenced waiter granted its permit by an unfenced registry's release
// gets a fencing token larger than every earlier one: the record asks for
// one, not the script that grants.
func TestSemaphoreGrantFencedByRecord(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		fenced := append(grantee[:len(grantee):len(grantee)], registry.WithFencing())
		a, waiter, _, got := grantReady(t, b, grantee, fenced, 1, nil)
		// An earlier fenced acquisition's token, then the unfenced holder.
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 3*time.Second, "the fenced waiter")
		first := le.Token()
		mustNil(t, le.Release(bg(t)))
		a2, err := semaphore(t, newRegPrefix(t, b.pool(t), waiter.Key()[:len(waiter.Key())-2], grantee...), "k", 1).Acquire(bg(t), 0)
		mustNil(t, err)
		next := acquirePermit(bg(t), waiter, 0)
		waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, waiter.Key(), false) == 1 })
		mustNil(t, a2.Release(bg(t)))
		le = recvWithin(t, next, 3*time.Second, "the fenced waiter, granted by an unfenced release")
		if first <= 0 || le.Token() <= first {
			t.Fatalf("fencing tokens %d then %d, want increasing", first, le.Token())
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// A grant for a semaphore its registry no longer caches (its waiter gave
// up, its leave failed, the instance was evicted) is given back, not held
// by nobody for its TTL.
func TestSemaphoreGrantToEvictedInstanceGivenBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx, grantee...), "k", 1)
		a, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		wr := newRegClientPrefix(t, &noLeaveClient{Client: registry.NewPoolClient(b.pool(t))}, pfx, grantee...)
		waiter := semaphore(t, wr, "k", 1)
		listenTurns(t, nil, wr, waiter) // its leaves fail: the entry stays until it lapses
		ctx, cancel := context.WithCancel(bg(t))
		got := acquirePermit(ctx, waiter, 20*time.Second)
		waitRecord(t, b, pfx, holder.Key())
		cancel()
		if le := recvWithin(t, got, 5*time.Second, "the waiter, given up"); le != nil {
			t.Fatalf("Acquire with its context ended: %v", le)
		}
		wr.ExpireUnusedOlderThan(-1)
		if wr.IsCached("k") {
			t.Fatal("the waiter's semaphore is still cached")
		}
		mustNil(t, a.Release(bg(t))) // grants the entry its leave failed to remove
		waitFor(t, 2*time.Second, "the permit granted to the evicted instance given back", func() bool { return zcard(t, b, holder.Key()) == 0 })
	})
}

// A pass that keeps its permit (sempass.lua) grants the listeners it
// tells after the offer of the other free permits, which counts them
// ahead: it never sets more permits than the semaphore has.
func TestSemaphorePassGrantsWithinCount(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		lk := w.LockKey("k")
		q, polls, info := w.QueueKey(lk), w.PollsKey(lk), w.WaitersKey(lk)
		heardOn(t, b, pfx) // a listener of every turn channel: every probe is heard
		c, err := redis.Dial("tcp", b.addr)
		mustNil(t, err)
		defer c.Close()
		now := time.Now().UnixMilli()
		in := func(d int64) string { return fmt.Sprint(now + d) }
		rec := func(seq int) string { return fmt.Sprintf("T #3 30000 %d 0 100 0", seq) }
		for _, more := range []string{"0", "1"} {
			b.do(t, "DEL", lk, q, polls, info)
			// A semaphore of 3: P (the passer's) and X held; in line a
			// poller not due soon, then listeners rb, ra (the passer's
			// instance) and rc, each with a grant record.
			b.do(t, "ZADD", lk, in(60000), "P#3", in(60000), "X#3")
			b.do(t, "ZADD", q, 1, "spin/1", 2, "rb/1", 3, "ra/1", 4, "rc/1")
			b.do(t, "ZADD", polls, 1, "spin/1")
			b.do(t, "HSET", info, "spin/1", "p "+in(10000)+" "+in(20000),
				"rb/1", "l "+in(10000)+" "+in(20000), "rb/1|", rec(5),
				"ra/1", "l "+in(10000)+" "+in(20000), "ra/1|", rec(6),
				"rc/1", "l "+in(10000)+" "+in(20000), "rc/1|", rec(7))
			_, err := c.Do("EVAL", registry.SemPassSource, 6, lk, q, info, w.TurnKey(lk), polls, w.FenceKey(lk),
				"P#3", 30000, w.TurnPrefix(), 5, 20, 2, 0, 3, 0, "ra/1", more, 1)
			mustNil(t, err)
			if n := zcard(t, b, lk); n > 3 {
				z, _ := redis.Strings(b.do(t, "ZRANGE", lk, 0, -1), nil)
				t.Fatalf("more=%s: %d permits set in a semaphore of 3: %q", more, n, z)
			}
		}
	})
}

// A refused semaphore attempt's grant record never replaces one of a later
// number of the same registry (a resent attempt's, landing late), whether
// or not the attempt knows that its entry is in line (ARGV[15]: one that
// does not adds the entry first, enqueue's new); a later number replaces
// it, and the waiter stays in line once.
func TestSemaphoreGrantRecordRules(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(6, registry.SemAcquireSource)
		c := b.pool(t).Get()
		defer c.Close()
		for _, inLine := range []string{"1", "0"} {
			t.Run("inLine="+inLine, func(t *testing.T) {
				lk := prefix(t) + ":sem"
				keys := []any{lk, lk + ":q", lk + ":i", lk + ":t", lk + ":p", lk + ":f"}
				_, err := c.Do("ZADD", lk, "+inf", "other#1") // every permit held: each attempt is refused
				mustNil(t, err)
				id := "A/1"
				attempt := func(rec string) []int64 {
					t.Helper()
					args := append(keys, "A:g5#1", 10000, id, 2, 100, 5, 0, "x-turn:", 30, 30, 5, 1, 1, 0, inLine, 0, 0, rec, "")
					v, err := redis.Int64s(script.Do(c, args...))
					mustNil(t, err)
					return v
				}
				record := func() string {
					v, _ := redis.String(c.Do("HGET", lk+":i", id+"|"))
					return v
				}
				if v := attempt("A:g #1 60000 9 3 5 0"); v[0] != 0 {
					t.Fatalf("reply %v, want refused", v)
				}
				if r := record(); r != "A:g #1 60000 9 3 5 0" {
					t.Fatalf("record %q after the first attempt", r)
				}
				attempt("A:g #1 60000 5 1 5 0")
				if r := record(); r != "A:g #1 60000 9 3 5 0" {
					t.Fatalf("record %q: an earlier number replaced a later one", r)
				}
				attempt("A:g #1 60000 12 1 5 0")
				if r := record(); r != "A:g #1 60000 12 1 5 0" {
					t.Fatalf("record %q, want the later number's", r)
				}
				if n, _ := redis.Int(c.Do("ZCARD", lk+":q")); n != 1 {
					t.Fatalf("%d in line, want the waiter once", n)
				}
			})
		}
	})
}
