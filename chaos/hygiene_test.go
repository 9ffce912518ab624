package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/registry"
)

// scriptCalls returns the server's count of EVAL and EVALSHA calls.
func scriptCalls(t *testing.T, addr string) int {
	info, _ := redis.String(do(t, addr, "INFO", "commandstats"), nil)
	total := 0
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "cmdstat_eval:") || strings.HasPrefix(line, "cmdstat_evalsha:") {
			v, _, _ := strings.Cut(strings.TrimPrefix(line[strings.Index(line, ":")+1:], "calls="), ",")
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total
}

// Scenario 14: watchdog hygiene. Unlocks racing the first renewal leave no
// renewal behind and report no false loss; a Lock whose ctx is cancelled
// holds nothing; Close wakes every waiter with ErrClosed; no goroutine
// outlives Close.
func TestWatchdogHygiene(t *testing.T) {
	// A renewal every 50ms. With 90ms (30ms periods) a CI machine still
	// busy with the previous scenario's processes once starved the watchdog
	// past a hold's validity: a real loss by lockyard's rules, not the
	// false one this scenario looks for.
	const ttl = 150 * time.Millisecond
	srv := startServer(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // the server's own goroutine is older
	poolA, poolB := newPool(srv.Addr), newPool(srv.Addr)
	rA, err := registry.New(poolA, "chaos14", registry.WithExpireAfter(ttl), registry.WithAutoRenew(), registry.WithLogger(testLogger(t)))
	mustNil(t, err)
	rB, err := registry.New(poolB, "chaos14", registry.WithLockType(registry.PubSubLock), registry.WithLogger(testLogger(t)))
	mustNil(t, err)
	a, _ := rA.Obtain("k")

	// Unlock racing the first renewal.
	const rounds = 200
	falseLoss := 0
	for range rounds {
		mustNil(t, a.LockContext(ctxFor(t, time.Second)))
		time.Sleep(time.Duration(rand.IntN(int(ttl / 2)))) // around the first renewal
		if err := a.UnlockContext(context.Background()); err != nil {
			falseLoss++
			t.Errorf("unlock: %v", err)
		}
	}
	before := scriptCalls(t, srv.Addr)
	time.Sleep(5 * ttl / 3) // five renewal periods
	after := scriptCalls(t, srv.Addr)
	pttl, _ := redis.Int(do(t, srv.Addr, "PTTL", a.Key()), nil)
	if after != before || pttl != -2 {
		t.Errorf("after the last release: %d scripts ran, PTTL %d (want 0 and -2)", after-before, pttl)
	}

	// A Lock whose ctx is cancelled while waiting holds nothing.
	mustNil(t, a.LockContext(ctxFor(t, time.Second)))
	b, _ := rB.Obtain("k")
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 2)
	go func() {
		err := b.LockContext(ctx)
		res <- err
		res <- b.UnlockContext(context.Background())
	}()
	time.Sleep(50 * time.Millisecond) // b is waiting
	cancelled := mono()
	cancel()
	mustIs(t, <-res, context.Canceled)
	cancelTook := time.Duration(mono() - cancelled)
	mustIs(t, <-res, registry.ErrNotOwner)

	// Close with waiters: every one returns ErrClosed.
	const waiters = 4
	errs := make(chan error, waiters)
	for range waiters {
		go func() { errs <- b.LockContext(context.Background()) }()
	}
	waitFor(t, 5*time.Second, "the waiters to queue", func() bool { return pubsubClients(t, srv.Addr) == 1 })
	time.Sleep(20 * time.Millisecond) // the local queue fills behind the Redis waiter
	closed := mono()
	rB.Close()
	for range waiters {
		select {
		case err := <-errs:
			mustIs(t, err, registry.ErrClosed)
		case <-time.After(2 * time.Second):
			t.Fatal("a waiter did not return after Close")
		}
	}
	closeTook := time.Duration(mono() - closed)
	mustNil(t, a.UnlockContext(context.Background()))
	rA.Close()
	poolA.Close()
	poolB.Close()
	figure(t, 14, "%d unlocks racing the first renewal (TTL %v): %d false losses, 0 scripts and PTTL -2 after the last release; cancelled Lock returned in %s holding nothing; Close woke %d waiters with ErrClosed in %s; goleak clean",
		rounds, ttl, falseLoss, ms(cancelTook), waiters, ms(closeTook))
}

// Scenario 15: UnlockContext with a cancelled ctx still deletes the key, and
// a waiter elsewhere gets the lock at once.
func TestCancelledUnlock(t *testing.T) {
	srv := startServer(t)
	rA := newRegistry(t, newPool(srv.Addr), "chaos15")
	rB := newRegistry(t, newPool(srv.Addr), "chaos15", registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5*time.Second))
	a, _ := rA.Obtain("k")
	b, _ := rB.Obtain("k")
	const rounds = 20
	var waits []time.Duration
	for range rounds {
		mustNil(t, a.LockContext(ctxFor(t, time.Second)))
		got := lockAsync(ctxFor(t, 10*time.Second), b, 0)
		waitFor(t, 5*time.Second, "the waiter's subscription", func() bool { return pubsubClients(t, srv.Addr) == 1 })
		time.Sleep(10 * time.Millisecond) // b's attempt has failed
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		released := mono()
		if err := a.UnlockContext(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("unlock with a cancelled ctx: %v", err)
		}
		w := <-got
		mustNil(t, w.err)
		waits = append(waits, time.Duration(w.at-released))
	}
	if n, _ := redis.Int(do(t, srv.Addr, "EXISTS", a.Key()), nil); n != 0 {
		t.Fatal("the key survived")
	}
	if m := median(waits); m > time.Second {
		t.Errorf("the waiter needed %v after a cancelled-ctx unlock: the key was not deleted", m)
	}
	figure(t, 15, "%d unlocks with an already-cancelled ctx: every key deleted; the waiter (poll 5s) acquired a median %s after each", rounds, ms(median(waits)))
}
