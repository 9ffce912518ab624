package registry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
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

// A waiter that queued while a permit was held by a semaphore that
// expected no waiter is told its turn at the plain release (its EXISTS
// finds the queue, and semrelease.lua gives the turn), not left to sleep
// until its poll.
func TestSemaphorePlainReleaseTellsWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second)}
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		holder := semaphore(t, newRegPrefix(t, cp, pfx, opts...), "k", 1)
		wreg := newRegPrefix(t, b.pool(t), pfx, opts...)
		// First the waiter's registry waits on another key, so that its
		// turn subscription is up (a new one makes its waiters try again,
		// since they may have missed a message): the permit of "k" can
		// then reach it only by its being told.
		warm := semaphore(t, newRegPrefix(t, b.pool(t), pfx, opts...), "warm", 1)
		w, err := warm.Acquire(bg(t), 0)
		mustNil(t, err)
		wgot := acquirePermit(bg(t), semaphore(t, wreg, "warm", 1), 0)
		waitFor(t, 5*time.Second, "the waiter in line for warm", func() bool { return queueLen(t, b, warm.Key(), false) == 1 })
		mustNil(t, w.Release(bg(t)))
		mustNil(t, recvWithin(t, wgot, 5*time.Second, "the waiter, on warm").Release(bg(t)))

		waiter := semaphore(t, wreg, "k", 1)
		a, err := holder.Acquire(bg(t), 10*time.Second)
		mustNil(t, err)
		got := acquirePermit(bg(t), waiter, 0)
		waitFor(t, 5*time.Second, "the waiter in line", func() bool { return queueLen(t, b, holder.Key(), false) == 1 })
		cp.Commands()
		released := time.Now()
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 5*time.Second, "the waiter")
		if d := time.Since(released); d > time.Second {
			t.Fatalf("the waiter got the permit %v after the release (poll 3s): not told", d)
		}
		cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" })
		if want := []string{"ZREM", "EXISTS", "EVALSHA"}; !slices.Equal(cmds, want) {
			t.Fatalf("the release sent %v, want %v", cmds, want)
		}
		mustNil(t, le.Release(bg(t)))
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
