package registry_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// A semaphore that expects no waiter gives its permits back with plain
// commands (ZREM and EXISTS of the wait queue, one pipeline), not a script;
// with fencing, or WithScriptsOnly, with semrelease.lua.

// cycleCommands returns the commands of the second uncontended
// Acquire+Release on a semaphore of a registry made with opts (the first
// warms the scripts and publishes the registry's label).
func cycleCommands(t *testing.T, b *backend, opts ...registry.Option) []string {
	t.Helper()
	cp := &redistest.CountingPool{Pool: b.pool(t)}
	s := semaphore(t, newReg(t, cp, opts...), "k", 2)
	for range 2 {
		cp.Commands()
		le, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		mustNil(t, le.Release(bg(t)))
	}
	if n := zcard(t, b, s.Key()); n != 0 {
		t.Fatalf("%d permits left after the release", n)
	}
	return slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" }) // after NOSCRIPT: the same script
}

func TestSemaphorePlainRelease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, c := range []struct {
			name string
			opts []registry.Option
			want []string
		}{
			{"plain", nil, []string{"EVALSHA", "ZREM", "EXISTS"}},
			{"fencing", []registry.Option{registry.WithFencing()}, []string{"EVALSHA", "EVALSHA"}},
			{"scripts only", []registry.Option{registry.WithScriptsOnly()}, []string{"EVALSHA", "EVALSHA"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				if got := cycleCommands(t, b, c.opts...); !slices.Equal(got, c.want) {
					t.Fatalf("an uncontended Acquire+Release sent %v, want %v", got, c.want)
				}
			})
		}
	})
}

// plainScene makes a permit of "k", held by a semaphore of holderReg
// (whose registry key is pfx) that expects no waiter, and a waiter of
// another registry (listening) in line for it.
func plainScene(t *testing.T, b *backend, pfx string, holderReg *registry.Registry) (held *registry.Lease, got <-chan *registry.Lease) {
	t.Helper()
	holder := semaphore(t, holderReg, "k", 1)
	held, err := holder.Acquire(bg(t), 10*time.Second)
	mustNil(t, err)
	got = acquirePermit(bg(t), semaphore(t, listening(t, b, pfx), "k", 1), 0)
	waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, holder.Key(), false) == 1 })
	return held, got
}

// listening returns a registry (registry key pfx, plainOpts: told by turn
// messages, poll 3s) whose turn subscription is up: it has waited on
// another key first. A new subscription makes its waiters try again (they
// may have missed a message), so a permit can reach a waiter of this one
// only by its being told, or at its poll.
func listening(t *testing.T, b *backend, pfx string) *registry.Registry {
	t.Helper()
	r := newRegPrefix(t, b.pool(t), pfx, plainOpts...)
	warm := semaphore(t, newRegPrefix(t, b.pool(t), pfx, plainOpts...), "warm", 1)
	w, err := warm.Acquire(bg(t), 0)
	mustNil(t, err)
	wgot := acquirePermit(bg(t), semaphore(t, r, "warm", 1), 0)
	waitFor(t, 5*time.Second, "the waiter in line for warm", func() bool { return queueLen(t, b, warm.Key(), false) == 1 })
	mustNil(t, w.Release(bg(t)))
	mustNil(t, recvWithin(t, wgot, 5*time.Second, "the waiter, on warm").Release(bg(t)))
	return r
}

// plainOpts are plainScene's registries' options.
var plainOpts = []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}

// toldWithin fails t unless the waiter of plainScene gets the permit within
// a second of released, and gives it back.
func toldWithin(t *testing.T, got <-chan *registry.Lease, released time.Time) {
	t.Helper()
	mustNil(t, toldSince(t, got, released, "the waiter", "the release (poll 3s)").Release(bg(t)))
}

// A waiter that queued while a permit was held by a semaphore that
// expected no waiter is told its turn at the plain release (its EXISTS
// finds the queue, and semrelease.lua gives the turn), not left to sleep
// until its poll.
func TestSemaphorePlainReleaseTellsWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		a, got := plainScene(t, b, pfx, newRegPrefix(t, cp, pfx, plainOpts...))
		cp.Commands()
		released := time.Now()
		mustNil(t, a.Release(bg(t)))
		toldWithin(t, got, released)
		cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" })
		if want := []string{"ZREM", "EXISTS", "EVALSHA"}; !slices.Equal(cmds, want) {
			t.Fatalf("the release sent %v, want %v", cmds, want)
		}
	})
}

// lossyPipe runs a pipeline on the server but loses its replies, once
// lossArmed (a connection reset after the request went out); once
// evalArmed, it fails without running it the first semrelease.lua that
// gives turns only (ARGV[8] = 1), as a stale pooled connection does.
type lossyPipe struct {
	registry.Client
	cmds                 registry.CommandClient
	lossArmed, evalArmed atomic.Bool
	loss, evalLoss       error // what the lost replies are: io.ErrUnexpectedEOF if nil
	existsOnly           bool  // lose the EXISTS's reply alone
}

func (c *lossyPipe) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return c.cmds.Pipeline(ctx, cmds)
}

func (c *lossyPipe) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	out := c.cmds.PipelineOn(ctx, key, cmds)
	if c.lossArmed.CompareAndSwap(true, false) {
		for i := range out {
			if !c.existsOnly || i == 1 {
				out[i] = registry.Result{Err: cmp.Or(c.loss, io.ErrUnexpectedEOF)}
			}
		}
	}
	return out
}

func (c *lossyPipe) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if len(args) == 8 && args[7] == 1 && c.evalArmed.CompareAndSwap(true, false) {
		return nil, cmp.Or(c.evalLoss, io.ErrUnexpectedEOF)
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// timeout is a network timeout: a release that meets it is not retried.
type timeout struct{}

func (timeout) Error() string   { return "i/o timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }

// A plain release whose replies are lost after the server ran it (a reset
// connection, which is retried, or a timeout, which is not), whose EXISTS
// alone fails, or whose turn-giving script fails (on a stale connection, or
// by a timeout): the waiter in line is told all the same (a release whose
// outcome is unknown gives the turns, and the failed script runs again, at
// once or in the background). A permit found gone at the retry after a
// reset connection was given back by the first attempt: Release reports
// no loss.
func TestSemaphorePlainReleaseFailuresTellWaiter(t *testing.T) {
	for _, lost := range []string{"pipeline replies", "pipeline timeout", "exists reply", "turn script", "turn script timeout"} {
		t.Run(lost, func(t *testing.T) {
			b := realBackend()
			pfx := prefix(t)
			pc := registry.NewPoolClient(b.pool(t))
			lc := &lossyPipe{Client: pc, cmds: pc.(registry.CommandClient)}
			a, got := plainScene(t, b, pfx, newRegClientPrefix(t, lc, pfx, plainOpts...))
			switch lost {
			case "pipeline timeout":
				lc.loss = timeout{}
				lc.lossArmed.Store(true)
			case "pipeline replies":
				lc.lossArmed.Store(true)
			case "exists reply":
				lc.existsOnly = true
				lc.lossArmed.Store(true)
			case "turn script timeout":
				lc.evalLoss = timeout{}
			}
			lc.evalArmed.Store(true)
			released := time.Now()
			err := a.Release(bg(t))
			switch lost {
			case "turn script", "turn script timeout", "exists reply":
				mustNil(t, err)
			case "pipeline timeout":
				mustIs(t, err, registry.ErrReleaseFailed)
			default:
				// Gone at the retry while the permit was valid: the first
				// attempt gave it back, which is no loss (issue 37, fault 5).
				mustNil(t, err)
			}
			toldWithin(t, got, released)
			if n := zcard(t, b, a.Key()); n != 0 {
				t.Fatalf("%d permits held after both releases", n)
			}
		})
	}
}

// evalOnly is a Client without CommandClient: its semaphores release by
// script.
type evalOnly struct{ registry.Client }

func TestSemaphoreReleaseWithoutCommandClient(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := semaphore(t, newRegClient(t, evalOnly{registry.NewPoolClient(b.pool(t))}), "k", 1)
		for range 2 {
			le, err := s.Acquire(bg(t), 0)
			mustNil(t, err)
			mustNil(t, le.Release(bg(t)))
		}
		if n := zcard(t, b, s.Key()); n != 0 {
			t.Fatalf("%d permits held after the releases", n)
		}
	})
}

// A semaphore that waited in line expects waiters: its release is the
// script, which gives the turns.
func TestSemaphoreReleaseAfterWaitIsScript(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock)}
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		other := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k", 1)
		s := semaphore(t, newRegPrefix(t, cp, pfx, opts...), "k", 1)
		a, err := other.Acquire(bg(t), 0)
		mustNil(t, err)
		got := acquirePermit(bg(t), s, 0)
		waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		cp.Commands()
		mustNil(t, le.Release(bg(t)))
		if cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" }); !slices.Equal(cmds, []string{"EVALSHA"}) {
			t.Fatalf("the release of a semaphore that waited sent %v, want [EVALSHA]", cmds)
		}
	})
}

// A head whose entry is in line runs no EXISTS when its turn comes: the
// attempt learns its rank from ZRANK (INFO commandstats, so the real
// server only).
func TestSemaphoreQueuedAttemptSkipsExists(t *testing.T) {
	b := realBackend()
	opts := []registry.Option{registry.WithLockType(registry.SpinLock), registry.WithIdleBetweenTries(200 * time.Millisecond)}
	s := semaphore(t, newReg(t, b.pool(t), opts...), "k", 1)
	tok := "someone else's"
	b.do(t, "ZADD", s.Key(), time.Now().Add(time.Hour).UnixMilli(), tok)
	b.do(t, "PEXPIRE", s.Key(), time.Hour.Milliseconds())
	got := acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the head in line", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
	before, err := redistest.CommandStats(b.addr)
	mustNil(t, err)
	b.do(t, "ZREM", s.Key(), tok) // no message: the head finds it free at its poll
	le := recvWithin(t, got, 5*time.Second, "the head")
	after, err := redistest.CommandStats(b.addr)
	mustNil(t, err)
	if n := after["zrank"] - before["zrank"]; n < 1 {
		t.Fatalf("%d ZRANK calls by the attempts in line, want at least 1", n)
	}
	if n := after["exists"] - before["exists"]; n != 0 {
		t.Fatalf("%d EXISTS calls by the attempts of a head in line, want 0", n)
	}
	mustNil(t, le.Release(bg(t)))
}

// A holder whose instance is in line (more of its leases wait) runs no
// EXISTS when it passes its permit on with sempass.lua (INFO commandstats,
// so the real server only).
func TestSemaphoreQueuedPassSkipsExists(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	other := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 1)
	s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3*time.Second),
		registry.WithRuns(time.Nanosecond, time.Minute)), "k", 1) // every pass is sempass.lua; no attempt of the second lease's for seconds
	o, err := other.Acquire(bg(t), 0)
	mustNil(t, err)
	first := acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the first lease in line", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
	second := acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the second lease waiting", func() bool { return s.Waiting() == 2 })
	mustNil(t, o.Release(bg(t)))
	a := recvWithin(t, first, 5*time.Second, "the first lease")
	waitFor(t, 5*time.Second, "the instance in line again for the second", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
	before, err := redistest.CommandStats(b.addr)
	mustNil(t, err)
	mustNil(t, a.Release(bg(t))) // passed to the second lease by sempass.lua
	after, err := redistest.CommandStats(b.addr)
	mustNil(t, err)
	c := recvWithin(t, second, 5*time.Second, "the second lease")
	if n := after["zscore"] - before["zscore"]; n != 1 { // sempass.lua's first call
		t.Fatalf("sempass.lua ran %d times for the pass, want 1", n)
	}
	if n := after["exists"] - before["exists"]; n != 0 {
		t.Fatalf("%d EXISTS calls by the pass of a holder in line, want 0", n)
	}
	mustNil(t, c.Release(bg(t)))
}

// Permits that expired and were not pruned yet (crashed holders') count as
// free at a release: it gives their turns too, to every waiter they fit
// (two real waiters on 2 permits); and a waiter told its turn on one is not
// refused by its attempt, which would count them as held while fewer than
// the permits are (a real waiter third in line, behind two listeners slow to
// try, on 3 permits): it prunes them, and takes its permit.
func TestSemaphoreExpiredPermitsAreFree(t *testing.T) {
	for _, c := range []struct {
		name                              string
		permits, crashed, ghosts, waiters int
	}{
		{"both told", 2, 1, 0, 2},
		{"third in line admitted", 3, 2, 2, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", c.permits)
				a, err := holder.Acquire(bg(t), 10*time.Second)
				mustNil(t, err)
				lk, far := holder.Key(), time.Now().Add(time.Hour).UnixMilli()
				for i := range c.crashed { // holders that will crash
					b.do(t, "ZADD", lk, far, fmt.Sprintf("crashed%d", i))
				}
				now := time.Now().UnixMilli()
				for i := range c.ghosts { // listeners of another process, slow to try
					id := fmt.Sprintf("ghost/%d", i)
					b.do(t, "ZADD", wire.Layout{}.QueueKey(lk), now-int64(c.ghosts-i)*1000, id)
					b.do(t, "HSET", wire.Layout{}.WaitersKey(lk), id, fmt.Sprintf("l %d %d", far, far))
				}
				var got []<-chan *registry.Lease
				for i := range c.waiters {
					got = append(got, acquirePermit(bg(t), semaphore(t, listening(t, b, pfx), "k", c.permits), 0))
					waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, lk, false) == c.ghosts+i+1 })
				}
				for i := range c.crashed { // expired long ago, and nobody pruned them
					b.do(t, "ZADD", lk, "XX", 1, fmt.Sprintf("crashed%d", i))
				}
				released := time.Now()
				mustNil(t, a.Release(bg(t)))
				var leases []*registry.Lease // held until all are in: a release would tell the next
				for i, g := range got {
					leases = append(leases, toldSince(t, g, released, fmt.Sprintf("waiter %d", i+1), "the release (poll 3s)"))
				}
				for _, le := range leases {
					mustNil(t, le.Release(bg(t)))
				}
			})
		})
	}
}

// resending runs each semacquire.lua twice, as a client that resends a
// call whose reply it lost does, and deletes the key lost between the two
// (data lost meanwhile).
type resending struct {
	registry.Client
	lost string
	addr string // the server (real.Addr if empty)
}

func (c resending) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() != "semacquire" {
		return c.Client.Eval(ctx, s, keys, args)
	}
	if _, err := c.Client.Eval(ctx, s, keys, args); err != nil {
		return nil, err
	}
	if _, err := redistest.Do(cmp.Or(c.addr, real.Addr), "DEL", c.lost); err != nil {
		return nil, err
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A resent acquisition whose permit is held already gets a new fencing
// token; a fence counter that it seeds again (lost meanwhile) gets a time
// to live, as every counter has.
func TestSemaphoreResendSeedsFenceWithTTL(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	lk := pfx + ":k"
	c := resending{Client: registry.NewPoolClient(b.pool(t)), lost: wire.Layout{}.FenceKey(lk)}
	s := semaphore(t, newRegClientPrefix(t, c, pfx, registry.WithFencing()), "k", 1)
	if s.Key() != lk {
		t.Fatalf("key %q, want %q", s.Key(), lk)
	}
	le, err := s.Acquire(bg(t), 0)
	mustNil(t, err)
	if le.Token() <= 0 {
		t.Fatalf("fencing token %d", le.Token())
	}
	if ms, _ := redis.Int64(b.do(t, "PTTL", c.lost), nil); ms <= 0 {
		t.Fatalf("the fence counter seeded by the resend has PTTL %d, want a time to live", ms)
	}
	mustNil(t, le.Release(bg(t)))
}

// A resent acquisition never leaves a permit held by no one: with a
// permit free and another waiter in line, the resend of a call whose
// first run took a permit finds that permit its own, instead of refusing
// the caller while the first run's permit stays taken until its TTL (as
// go-redis's retries would do; goredis/client.go says they are safe).
func TestSemaphoreResendWithWaiterInLine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		lk := pfx + ":k"
		w := wire.Layout{}
		// A listener of another registry is first in line, told of no turn
		// yet: it takes one of the two permits' turns.
		far := time.Now().Add(time.Hour).UnixMilli()
		b.do(t, "ZADD", w.QueueKey(lk), 1, "other/1")
		b.do(t, "HSET", w.WaitersKey(lk), "other/1", fmt.Sprintf("l %d %d", far, far))
		c := resending{Client: registry.NewPoolClient(b.pool(t)), lost: pfx + ":nothing", addr: b.addr}
		s := semaphore(t, newRegClientPrefix(t, c, pfx), "k", 2)
		le, err := s.TryAcquire(bg(t), time.Minute)
		mustNil(t, err)
		if n, _ := redis.Int(b.do(t, "ZCARD", lk), nil); n != 1 {
			t.Fatalf("%d permits taken after one resent acquisition, want 1 (the other is held by no one)", n)
		}
		mustNil(t, le.Release(bg(t)))
		if n, _ := redis.Int(b.do(t, "ZCARD", lk), nil); n != 0 {
			t.Fatalf("%d permits taken after the release, want 0", n)
		}
	})
}

// An attempt that finds every permit taken counts the live ones: expired
// permits (crashed holders', never pruned) do not refuse it, and it prunes
// them, so that the key holds only live permits after it; an attempt that
// is refused leaves the live ones as they were.
func TestSemaphoreFullAttemptPrunesExpired(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		s := semaphore(t, newReg(t, b.pool(t)), "k", 2)
		b.do(t, "ZADD", s.Key(), 1, "crashed long ago#2") // expired, and nobody pruned it
		a, err := s.TryAcquire(bg(t), 0)                  // one held of 2: taken without counting
		mustNil(t, err)
		if n := zcard(t, b, s.Key()); n != 2 {
			t.Fatalf("%d permits in Redis after the first, want 2 (the expired one kept)", n)
		}
		c, err := s.TryAcquire(bg(t), 0) // 2 of 2 in the key, one live
		mustNil(t, err)
		if n := zcard(t, b, s.Key()); n != 2 {
			t.Fatalf("%d permits in Redis after the second, want 2 (the expired one pruned)", n)
		}
		if v := b.do(t, "ZSCORE", s.Key(), "crashed long ago#2"); v != nil {
			t.Fatalf("the expired permit is still in the key (score %s)", v)
		}
		_, err = s.TryAcquire(bg(t), 0)
		mustIs(t, err, registry.ErrNotObtained)
		if n := zcard(t, b, s.Key()); n != 2 {
			t.Fatalf("%d permits in Redis after a refusal, want 2", n)
		}
		mustNil(t, a.Release(bg(t)))
		mustNil(t, c.Release(bg(t)))
	})
}

// A TryAcquire refused on a full semaphore costs the server ZCARD, TIME,
// ZCOUNT (the live permits) and ZSCORE (a resend's own permit) besides the
// script, with few permits or many (a waiter's attempt reads a small
// semaphore's permits with their expiries instead: the scores' reply costs
// the server more than the two calls): it prunes nothing and reads no
// expiry, since it does not sleep (INFO commandstats, so the real server
// only).
func TestSemaphoreTryRefusalCalls(t *testing.T) {
	b := realBackend()
	for _, permits := range []int{1, 8, 9} {
		t.Run(fmt.Sprint(permits), func(t *testing.T) {
			pfx := prefix(t)
			s := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", permits)
			var held []*registry.Lease
			for range permits {
				l, err := s.Acquire(bg(t), 0)
				mustNil(t, err)
				held = append(held, l)
			}
			try := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", permits)
			_, err := try.TryAcquire(bg(t), 0) // the first compares counts: not measured
			mustIs(t, err, registry.ErrNotObtained)
			before, err := redistest.CommandStats(b.addr)
			mustNil(t, err)
			_, err = try.TryAcquire(bg(t), 0)
			mustIs(t, err, registry.ErrNotObtained)
			after, err := redistest.CommandStats(b.addr)
			mustNil(t, err)
			want := map[string]int{"evalsha": 1, "zcard": 1, "time": 1, "zcount": 1, "zscore": 1}
			for name := range after {
				want[name] += 0 // every command that ran, wanted or not
			}
			delete(want, "info")
			for name, n := range want {
				if d := after[name] - before[name]; d != n {
					t.Errorf("%s ran %d times for a refused TryAcquire, want %d", name, d, n)
				}
			}
			for _, l := range held {
				mustNil(t, l.Release(bg(t)))
			}
		})
	}
}

// A listener's first attempt on a full semaphore of few permits, refused
// and queued, costs the server ZCARD, TIME and one ZRANGE of the permits
// (the live ones, the soonest's expiry, a resend's own permit), the ZADD
// that puts it in line (no read of its place: it expects to be new) and
// its entry (HSET, and the queue keys' PTTL and PEXPIRE): no ZCOUNT, no
// ZSCORE, no HGET of a grant record. With more than 8 permits it counts
// the live ones (ZCOUNT), looks for its own (ZSCORE) and reads the
// soonest (ZRANGE) one by one. Either way it sleeps until the soonest
// permit expires, sooner than its poll (INFO commandstats, the real
// server).
func TestSemaphoreRefusedAttemptCalls(t *testing.T) {
	b := realBackend()
	c := b.pool(t).Get()
	defer c.Close()
	for _, tc := range []struct {
		permits int
		want    map[string]int
	}{
		{1, map[string]int{"eval": 1, "zcard": 1, "time": 1, "zrange": 1, "zadd": 1, "hset": 1, "pttl": 2, "pexpire": 2}},
		{9, map[string]int{"eval": 1, "zcard": 1, "time": 1, "zcount": 1, "zscore": 1, "zrange": 1, "zadd": 1, "hset": 1, "pttl": 2, "pexpire": 2}},
	} {
		t.Run(fmt.Sprint(tc.permits), func(t *testing.T) {
			lk := prefix(t) + ":sem"
			keys := []any{lk, lk + ":q", lk + ":i", lk + ":t", lk + ":p", lk + ":f"}
			now, err := redis.Int64s(c.Do("TIME"))
			mustNil(t, err)
			ms := now[0]*1000 + now[1]/1000
			for i := range tc.permits {
				_, err = c.Do("ZADD", lk, ms+2000+int64(i)*1000, fmt.Sprintf("other%d#%d", i, tc.permits))
				mustNil(t, err)
			}
			args := append(keys, fmt.Sprintf("A:g5#%d", tc.permits), 10000, "A/1", 2, 5000, 5, 0, "x-turn:", 30, 30, 5, 1, tc.permits, 0, 0, 0, 0, fmt.Sprintf("A:g #%d 60000 5 1 5 0", tc.permits), "")
			before, err := redistest.CommandStats(b.addr)
			mustNil(t, err)
			v, err := redis.Int64s(c.Do("EVAL", append([]any{registry.SemAcquireSource, len(keys)}, args...)...))
			mustNil(t, err)
			after, err := redistest.CommandStats(b.addr)
			mustNil(t, err)
			if len(v) != 3 || v[0] != 0 || v[2] != 1 {
				t.Fatalf("reply %v, want {0, sleep, 1}: refused and queued", v)
			}
			if sleep := v[1]; sleep < 1000 || sleep > 2001 {
				t.Fatalf("sleep %d ms, want until the soonest permit expires (in 2 s, sooner than its 5 s poll)", sleep)
			}
			want := tc.want
			for name := range after {
				want[name] += 0
			}
			delete(want, "info")
			for name, n := range want {
				if d := after[name] - before[name]; d != n {
					t.Errorf("%s ran %d times for a refused first attempt, want %d", name, d, n)
				}
			}
			if r, _ := redis.String(c.Do("HGET", lk+":i", "A/1|")); r != fmt.Sprintf("A:g #%d 60000 5 1 5 0", tc.permits) {
				t.Fatalf("grant record %q, want the attempt's", r)
			}
		})
	}
}

// An attempt of an instance that expects the semaphore free asks first,
// with one EXISTS, whether its key or its wait queue exist: neither (no
// ZCARD, no second EXISTS), the key only (a permit held: ZCARD, and the
// queue is known empty), or the queue only: a waiter in line, whose turn a
// newcomer does not take (INFO commandstats, so the real server only for
// the counts).
func TestSemaphoreQuietAttemptReads(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, c := range []struct {
			name                   string
			held, inLine, ok       bool
			permits, exists, zcard int
		}{
			{"nothing", false, false, true, 2, 1, 0},
			{"a permit held", true, false, true, 2, 1, 1},
			{"a waiter in line", false, true, false, 1, 1, 1},
		} {
			t.Run(c.name, func(t *testing.T) {
				pfx := prefix(t)
				lk := pfx + ":k"
				if c.held {
					b.do(t, "ZADD", lk, time.Now().Add(time.Hour).UnixMilli(), "someone else's#2")
					b.do(t, "PEXPIRE", lk, time.Hour.Milliseconds())
				}
				if c.inLine { // a listener of another process, due to try
					w, far := wire.Layout{}, time.Now().Add(time.Hour).UnixMilli()
					b.do(t, "ZADD", w.QueueKey(lk), 1, "other/1")
					b.do(t, "HSET", w.WaitersKey(lk), "other/1", fmt.Sprintf("l %d %d", far, far))
				}
				s := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", c.permits)
				var before map[string]int
				if b.mr == nil {
					var err error
					before, err = redistest.CommandStats(b.addr)
					mustNil(t, err)
				}
				le, err := s.TryAcquire(bg(t), 0)
				if !c.ok {
					mustIs(t, err, registry.ErrNotObtained)
				} else {
					mustNil(t, err)
				}
				if b.mr == nil {
					after, err := redistest.CommandStats(b.addr)
					mustNil(t, err)
					if n := after["exists"] - before["exists"]; n != c.exists {
						t.Errorf("%d EXISTS, want %d", n, c.exists)
					}
					if n := after["zcard"] - before["zcard"]; n != c.zcard {
						t.Errorf("%d ZCARD, want %d", n, c.zcard)
					}
				}
				if le != nil {
					mustNil(t, le.Release(bg(t)))
				}
			})
		}
	})
}

// A waiter in line that polls while every permit is held learns nothing
// from its rank (it sleeps its poll, or to the soonest expiry): its
// attempts run no ZRANK (INFO commandstats, so the real server only).
func TestSemaphoreFullPollSkipsRank(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 1)
	a, err := holder.Acquire(bg(t), 0)
	mustNil(t, err)
	s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.SpinLock), registry.WithIdleBetweenTries(20*time.Millisecond)), "k", 1)
	got := acquirePermit(bg(t), s, 0)
	waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
	before, err := redistest.CommandStats(b.addr)
	mustNil(t, err)
	var after map[string]int
	waitFor(t, 5*time.Second, "three polls", func() bool {
		after, err = redistest.CommandStats(b.addr)
		mustNil(t, err)
		return after["evalsha"]-before["evalsha"] >= 3
	})
	if n := after["zrank"] - before["zrank"]; n != 0 {
		t.Errorf("%d ZRANK calls by %d polls of a full semaphore, want 0", n, after["evalsha"]-before["evalsha"])
	}
	mustNil(t, a.Release(bg(t)))
	mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter").Release(bg(t)))
}

// A semaphore whose release found a waiter expects waiters for a second
// (core.Crowd, as a lock does): its releases are semrelease.lua, which
// gives the turns in the same round trip, though they find nobody; then
// plain commands again.
func TestSemaphoreExpectsWaitersForASecond(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		s := semaphore(t, newRegPrefix(t, cp, pfx), "k", 1)
		cycle := func() []string {
			t.Helper()
			cp.Commands()
			le, err := s.Acquire(bg(t), 0)
			mustNil(t, err)
			mustNil(t, le.Release(bg(t)))
			return slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" })
		}
		plain, script := []string{"EVALSHA", "ZREM", "EXISTS"}, []string{"EVALSHA", "EVALSHA"}
		cycle() // the first publishes the registry's label
		if got := cycle(); !slices.Equal(got, plain) {
			t.Fatalf("an uncontended cycle sent %v, want %v", got, plain)
		}

		le, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		got := acquirePermit(bg(t), semaphore(t, listening(t, b, pfx), "k", 1), 0)
		waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, s.Key(), false) == 1 })
		found := time.Now()
		cp.Commands()
		mustNil(t, le.Release(bg(t)))
		if got := cp.Commands(); !slices.Equal(got, []string{"ZREM", "EXISTS", "EVALSHA"}) {
			t.Fatalf("a plain release that found a waiter sent %v, want ZREM, EXISTS, then the turns' script", got)
		}
		mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter's turn").Release(bg(t)))
		waitFor(t, 5*time.Second, "the line empty", func() bool { return queueLen(t, b, s.Key(), false) == 0 })

		for i := range 2 {
			if got := cycle(); time.Since(found) < 900*time.Millisecond && !slices.Equal(got, script) {
				t.Fatalf("cycle %d, %v after a release found a waiter, sent %v, want %v (waiters expected)", i, time.Since(found), got, script)
			}
		}
		waitFor(t, 5*time.Second, "a plain release again", func() bool { return slices.Equal(cycle(), plain) })
		if d := time.Since(found); d < time.Second {
			t.Fatalf("a plain release %v after one found a waiter, want a second or more", d)
		}
	})
}

// semacquire.lua takes a free permit with nobody in line before it defines
// any rule (its uncontended path), and says so with a plain 1; a fencing
// token to take, or leases of the caller's own behind it, take the full
// path and its {1, fence, ...}. Either way the permit expires at the
// server's clock plus the TTL, and so does the key.
func TestSemaphoreUncontendedScriptPath(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(6, registry.SemAcquireSource)
		c := b.pool(t).Get()
		defer c.Close()
		for i, tc := range []struct {
			name        string
			fence, more string
			plain       bool
		}{
			{"uncontended", "0", "0", true},
			{"fencing", "1", "0", false},
			{"more of its own", "0", "1", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lk := fmt.Sprintf("fast-%d", i)
				keys := []any{lk, lk + ":q", lk + ":i", lk + ":t", lk + ":p", lk + ":f"}
				token := "tok#1"
				args := append(keys, token, 2000, "reg/1", 2, 100, 5, tc.fence, "x-turn:", 30, 30, 5, 1, 1, tc.more, 0, 0, 1)
				v, err := script.Do(c, args...)
				mustNil(t, err)
				if _, plain := v.(int64); plain != tc.plain || (plain && v.(int64) != 1) {
					t.Fatalf("reply %v; want the plain 1: %v", v, tc.plain)
				}
				now, err := redis.Int64s(c.Do("TIME"))
				mustNil(t, err)
				score, err := redis.Float64(c.Do("ZSCORE", lk, token))
				mustNil(t, err)
				if want := float64(now[0]*1000+now[1]/1000) + 2000; score < want-1000 || score > want+1 {
					t.Fatalf("the permit expires at %.0f; want about %.0f (the server's clock + TTL)", score, want)
				}
				if pttl, err := redis.Int64(c.Do("PTTL", lk)); err != nil || pttl <= 1000 || pttl > 2000 {
					t.Fatalf("the key's PTTL is %d (%v); want the TTL, 2000 ms", pttl, err)
				}
			})
		}
	})
}

// TestSemaphoreRefusedTryScriptPath: semacquire.lua refuses a caller that
// does not wait (TryAcquire) on a semaphore whose permits are all held and
// live before it defines any rule; it still counts an expired permit as
// free (the full path prunes it and grants one) and still answers a resend
// of a token that holds a permit with a grant.
func TestSemaphoreRefusedTryScriptPath(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(6, registry.SemAcquireSource)
		c := b.pool(t).Get()
		defer c.Close()
		now, err := redis.Int64s(c.Do("TIME"))
		mustNil(t, err)
		ms := now[0]*1000 + now[1]/1000
		for i, tc := range []struct {
			name    string
			expired bool   // one of the two permits expired a second ago
			token   string // the caller's token ("a#2": a resend of a holder's)
			granted bool
		}{
			{"all live", false, "tok#2", false},
			{"one expired", true, "tok#2", true},
			{"a resend of a holder's", false, "a#2", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lk := fmt.Sprintf("try-%d", i)
				second := ms + 60000
				if tc.expired {
					second = ms - 1000
				}
				_, err := c.Do("ZADD", lk, ms+60000, "a#2", second, "b#2")
				mustNil(t, err)
				_, err = c.Do("ZADD", lk+":q", 1, "other/1") // someone waits: no uncontended path
				mustNil(t, err)
				keys := []any{lk, lk + ":q", lk + ":i", lk + ":t", lk + ":p", lk + ":f"}
				args := append(keys, tc.token, 2000, "reg/t", 0, 100, 5, 0, "x-turn:", 30, 30, 5, 1, 2, 0, 0, 0, 0)
				v, err := script.Do(c, args...)
				mustNil(t, err)
				x, err := redis.Int64s(v, nil)
				mustNil(t, err)
				if got := x[0] == 1; got != tc.granted {
					t.Fatalf("reply %v; want granted: %v", x, tc.granted)
				}
				if !tc.granted && (len(x) != 3 || x[0] != 0 || x[2] != -1) {
					t.Fatalf("reply %v; want {0, 0, -1}: refused, not queued", x)
				}
			})
		}
	})
}
