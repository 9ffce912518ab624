package registry_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// scriptsOnly drops EVAL, the fallback of an EVALSHA that found the script
// missing (miniredis and a fresh server start without it).
func scriptsOnly(cmds []string) []string {
	return slices.DeleteFunc(cmds, func(c string) bool { return c == "EVAL" })
}

// An uncontended obtain is a plain SET NX PX (a TryLock's SET NX GET PX).
// Once an obtain finds the key taken, the obtain script runs instead (the
// wait queue, when to try again), until an acquisition gets the key at its
// first attempt. A failed TryLock is one command either way, and never
// queues. With fencing the script always runs. The key is the same either
// way.
func TestObtainPlainSetFirst(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newRegPrefix(t, cp, pfx, registry.WithExpireAfter(5*time.Second))
		w := obtain(t, r, "warm-up") // the eviction-policy check (INFO)
		mustNil(t, w.LockContext(bg(t)))
		mustNil(t, w.UnlockContext(bg(t)))
		l := obtain(t, r, "k")
		cp.Commands()
		mustNil(t, l.LockContext(bg(t)))
		if cmds := cp.Commands(); !slices.Equal(cmds, []string{"SET"}) {
			t.Fatalf("an uncontended Lock sent %v, want [SET]", cmds)
		}
		if p := pttl(t, b, l.Key()); p <= 4000 || p > 5000 {
			t.Fatalf("PTTL after the SET: %d ms, want the registry's 5s", p)
		}
		v, err := redis.String(b.do(t, "GET", l.Key()), nil)
		mustNil(t, err)
		if len(v) < 37 || v[36] != ':' { // wire format: clientID:sequence
			t.Fatalf("the key holds %q, not a token", v)
		}
		mustNil(t, l.UnlockContext(bg(t)))

		// Another registry holds it: a TryLock's SET NX GET fails, and
		// nothing else is sent; the next attempt runs the script.
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, other.LockContext(bg(t)))
		cp.Commands()
		mustIs(t, l.TryLockContext(bg(t)), registry.ErrNotObtained)
		if cmds := cp.Commands(); !slices.Equal(cmds, []string{"SET"}) {
			t.Fatalf("the first TryLock against a holder sent %v, want one SET", cmds)
		}
		mustIs(t, l.TryLockContext(bg(t)), registry.ErrNotObtained)
		if cmds := scriptsOnly(cp.Commands()); !slices.Equal(cmds, []string{"EVALSHA"}) {
			t.Fatalf("a TryLock after the key was found taken sent %v, want the script alone", cmds)
		}
		if n := queueLen(t, b, l.Key(), false); n != 0 {
			t.Fatalf("%d waiters queued after TryLocks, want none", n)
		}
		// A Lock's SET fails, then the script queues it.
		ctx, cancel := context.WithTimeout(bg(t), 50*time.Millisecond)
		waiter := obtain(t, r, "k2")
		mustNil(t, obtain(t, newRegPrefix(t, b.pool(t), pfx), "k2").LockContext(bg(t)))
		cp.Commands()
		mustIs(t, waiter.LockContext(ctx), context.DeadlineExceeded)
		cancel()
		if cmds := scriptsOnly(cp.Commands()); len(cmds) < 2 || cmds[0] != "SET" || cmds[1] != "EVALSHA" {
			t.Fatalf("a Lock against a holder sent %v, want SET, then the script", cmds)
		}
		mustNil(t, other.UnlockContext(bg(t)))
		mustNil(t, l.TryLockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
		cp.Commands()
		mustNil(t, l.LockContext(bg(t)))
		if cmds := cp.Commands(); !slices.Equal(cmds, []string{"SET"}) {
			t.Fatalf("after a first-attempt acquisition, Lock sent %v, want [SET] again", cmds)
		}
		mustNil(t, l.UnlockContext(bg(t)))

		fenced := obtain(t, newRegPrefix(t, cp, prefix(t), registry.WithFencing()), "k")
		mustNil(t, fenced.LockContext(bg(t))) // INFO, as above
		mustNil(t, fenced.UnlockContext(bg(t)))
		cp.Commands()
		mustNil(t, fenced.LockContext(bg(t)))
		if cmds := scriptsOnly(cp.Commands()); !slices.Equal(cmds, []string{"EVALSHA"}) || fenced.Token() <= 0 {
			t.Fatalf("a fenced Lock sent %v with token %d, want the script and a token", cmds, fenced.Token())
		}
		mustNil(t, fenced.UnlockContext(bg(t)))
	})
}

// resentSET is a Client whose SET NX is sent twice, as go-redis resends a
// command whose reply was lost: the second finds the key set by the first.
type resentSET struct {
	registry.Client
	sets int
}

func (c *resentSET) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	sc := c.Client.(registry.SetNXClient)
	c.sets++
	if _, err := sc.SetNX(ctx, key, value, ttl); err != nil {
		return false, err
	}
	return sc.SetNX(ctx, key, value, ttl)
}

// A resent SET that finds the key already holding its token (the reply of
// the first was lost) gets the lock: the obtain script that follows it
// finds the token and grants it, as it does for a resent script.
func TestObtainResentSET(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		c := &resentSET{Client: registry.NewPoolClient(b.pool(t))}
		r, err := registry.NewWithClient(c, prefix(t))
		mustNil(t, err)
		t.Cleanup(func() { r.Close() })
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		if c.sets != 1 {
			t.Fatalf("%d SETs, want the one that was resent", c.sets)
		}
		mustNil(t, l.UnlockContext(bg(t))) // the release finds its own token
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("the key outlived the release")
		}
	})
}

// A release that finds waiters queued makes the releasing lock's next
// acquisition start with the obtain script, which respects their turns: a
// plain SET would take a key kept for them.
func TestReleaseSeesWaiters(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newRegPrefix(t, cp, pfx)
		w := obtain(t, r, "warm-up") // the eviction-policy check (INFO)
		mustNil(t, w.LockContext(bg(t)))
		mustNil(t, w.UnlockContext(bg(t)))
		l := obtain(t, r, "k")
		mustNil(t, l.LockContext(bg(t)))
		// A poller that is not due for a long while: queued, but given no
		// turn, so the key stays free for l's next try.
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(time.Minute)), "k")
		got := lockInBackground(t, other)
		waitQueued(t, b, l, 1)
		mustNil(t, l.UnlockContext(bg(t)))
		cp.Commands()
		mustNil(t, l.LockContext(bg(t)))
		if cmds := scriptsOnly(cp.Commands()); !slices.Equal(cmds, []string{"EVALSHA"}) {
			t.Fatalf("after a release that found a waiter, Lock sent %v, want the obtain script", cmds)
		}
		mustNil(t, l.UnlockContext(bg(t)))
		_ = got // the poller tries again in a minute; the test's end stops it
	})
}

// A pass that releases the key for a waiting registry queues the next
// local goroutine behind it: it waits, then obtains with the script, not a
// plain SET that would skip the other registry's turn.
func TestPassSeesWaiters(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		r := newRegPrefix(t, cp, pfx)
		l := obtain(t, r, "k")
		h0 := mustHold(t, l)
		other := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
		otherGot := lockInBackground(t, other)
		waitQueued(t, b, l, 1)
		got := make(chan error, 1)
		go func() { // another TTL: the hand-off runs pass.lua, not a free pass
			err := l.LockFor(bg(t), 7*time.Second)
			if err == nil {
				err = l.UnlockContext(bg(t))
			}
			got <- err
		}()
		waitFor(t, 5*time.Second, "the goroutine to queue", func() bool { return l.Waiters() == 1 })
		cp.Commands()
		mustNil(t, h0.unlock())
		mustNil(t, recvWithin(t, otherGot, 5*time.Second, "the other registry's turn"))
		mustNil(t, recvWithin(t, got, 5*time.Second, "the local goroutine's turn"))
		cmds := scriptsOnly(cp.Commands())
		if len(cmds) < 2 || cmds[0] != "EVALSHA" || cmds[1] != "EVALSHA" {
			t.Fatalf("after a pass that released for a waiter, the next goroutine's commands were %v, want the pass, then the obtain script", cmds)
		}
	})
}

// TestObtainRefusedTryScriptPath: obtain.lua refuses a caller that does
// not wait (TryLock) on a key another holder has before it defines any
// rule, with the sleep the full path gives a caller not in line (until the
// holder's expiry when that is sooner than a poll, else a poll less the
// jitter), and queues none; a caller that polls is still queued.
func TestObtainRefusedTryScriptPath(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(6, registry.ObtainSource)
		c := b.pool(t).Get()
		defer c.Close()
		for i, tc := range []struct {
			name       string
			pttl       int // the holder's, ms
			mode       int
			sleepAbout int // the sleep in the reply, within 20 ms below
			queued     bool
		}{
			{"held long", 60000, 0, 100 - 7, false},
			{"expiring before a poll", 50, 0, 51, false},
			{"a poller", 60000, 1, 100 - 7, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lk := fmt.Sprintf("try-lock-%d", i)
				_, err := c.Do("SET", lk, "other", "PX", tc.pttl)
				mustNil(t, err)
				keys := []any{lk, lk + ":q", lk + ":i", lk + ":t", lk + ":p", lk + ":f"}
				args := append(keys, "tok", 2000, "reg/1", tc.mode, 100, 7, 0, "x-channel:"+lk, 30, 30, 5, 1)
				x, err := redis.Int64s(script.Do(c, args...))
				mustNil(t, err)
				if len(x) != 3 || x[0] != 0 || x[1] > int64(tc.sleepAbout) || x[1] < int64(tc.sleepAbout)-20 {
					t.Fatalf("reply %v; want {0, about %d, after}", x, tc.sleepAbout)
				}
				if queued := x[2] != -1; queued != tc.queued {
					t.Fatalf("reply %v: queued %v, want %v", x, queued, tc.queued)
				}
				n, err := redis.Int(c.Do("ZCARD", lk+":q"))
				mustNil(t, err)
				if (n == 1) != tc.queued {
					t.Fatalf("%d waiters in line; want queued: %v", n, tc.queued)
				}
			})
		}
	})
}
