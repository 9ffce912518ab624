package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 20: several keys at once under faults. Three processes, each
// with a PubSubLock and a SpinLock registry of four goroutines, take a
// random 3 of 8 keys with AcquireAll (fenced, renewed, TTL 1 s) and write
// to each key's fenced resource (scenario 1's) while they hold them:
//   - no fault, CLIENT KILL of every client connection every 150 ms, and
//     SCRIPT FLUSH every 150 ms: at most one writer inside each key (and
//     with no fault no error), every call returns, and afterwards one
//     caller takes all 8 keys within their TTL and 2 s (every lease free);
//   - a holder of 4 keys SIGKILLed once it renewed them (TTL 1 s): a
//     waiter on each of the 4 keys, each a RedisLock of its own, gets in
//     within the TTL and a poll of the kill.

const (
	multiKeys = 8 // the keys that scenario 20's processes share
	multiTake = 3 // the keys of each acquisition
)

func multiKey(i int) string { return "acct" + strconv.Itoa(i) }

// multiContend is a child: two registries of four goroutines each take a
// random multiTake of the multiKeys keys until Deadline, write to each
// key's fenced resource while they hold them (unless Lost closed first),
// and report their counts.
func multiContend(a semArgs) error {
	pool := newPool(a.Addr)
	defer pool.Close()
	res := resource{a.Res}
	ctx, cancel := context.WithTimeout(context.Background(), a.Deadline)
	defer cancel()
	var acquired, written, refused, lost, errs atomic.Int64
	err := fourEach(a, pool, func(r *registry.Registry) (func(), error) {
		return func() {
			rc, err := redis.Dial("tcp", a.Res)
			if err != nil {
				errs.Add(1)
				return
			}
			defer rc.Close()
			for ctx.Err() == nil {
				var keys []string
				for _, k := range rand.Perm(multiKeys)[:multiTake] {
					keys = append(keys, multiKey(k))
				}
				le, err := r.AcquireAll(ctx, keys, 0)
				if err != nil {
					// A wait gives up at once when its next try would
					// come past the run's deadline: not an error.
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						errs.Add(1)
					}
					continue
				}
				acquired.Add(1)
				select {
				case <-le.Lost(): // checked right before entering
					lost.Add(1)
				default:
					tokens := le.Tokens()
					var in []string
					for j, k := range keys {
						switch ok, err := res.enter(rc, k, tokens[j]); {
						case err != nil:
							errs.Add(1)
						case !ok:
							refused.Add(1)
						default:
							in = append(in, k)
						}
					}
					if len(in) == len(keys) {
						written.Add(1)
					}
					time.Sleep(time.Duration(1+rand.IntN(2)) * time.Millisecond)
					for _, k := range in {
						if res.leave(rc, k) != nil {
							errs.Add(1)
						}
					}
				}
				countRelease(le, &lost, &errs)
			}
		}, nil
	})
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "done", "acquired": acquired.Load(), "written": written.Load(),
		"refused": refused.Load(), "lost": lost.Load(), "errors": errs.Load()})
	return nil
}

// multiRun runs three contending processes for d while fault runs, and
// returns their summed counts and the highest number of writers that were
// ever inside one key.
func multiRun(t *testing.T, srvAddr, resAddr, prefix string, d time.Duration, fault func(stop <-chan struct{})) (sum map[string]int64, peak int) {
	t.Helper()
	sum = runChildren(t, "multicontend", semArgs{Addr: srvAddr, Res: resAddr, Prefix: prefix, TTL: time.Second, Deadline: d},
		fault, "acquired", "written", "refused", "lost", "errors")
	for i := range multiKeys {
		p, _ := resource{resAddr}.stats(t, multiKey(i))
		peak = max(peak, p)
	}
	return sum, peak
}

// allKeysFree checks that one caller takes every key of scenario 20 within
// ttl + 2s of the end of the faults: no lease is left held longer than its
// TTL.
func allKeysFree(t *testing.T, addr, prefix string, ttl time.Duration) time.Duration {
	t.Helper()
	var keys []string
	for i := range multiKeys {
		keys = append(keys, multiKey(i))
	}
	return freeAfter(t, addr, prefix, ttl, func(ctx context.Context, r *registry.Registry) (*registry.Lease, error) {
		return r.AcquireAll(ctx, keys, 0)
	})
}

func TestMultiKeyFaults(t *testing.T) {
	const d = 3 * time.Second
	underFaults(t, "chaos20", func(t *testing.T, r faultRun) {
		sum, peak := multiRun(t, r.srv.Addr, r.res.Addr, r.prefix, d, r.fault)
		if peak > 1 || sum["written"] == 0 {
			t.Fatalf("%s: %v, peak %d writers inside one key", r.name, sum, peak)
		}
		if !r.faulty && sum["errors"] != 0 {
			t.Fatalf("%s: %v, want no error", r.name, sum)
		}
		back := allKeysFree(t, r.srv.Addr, r.prefix, time.Second)
		figure(t, 20, "several keys at once, 3 processes x 8 goroutines, a random %d of %d keys each, %s (%d rounds), %v: %d acquisitions, %d with every write accepted, peak %d inside a key, %d writes refused by a fence, %d lost, %d errors; all %d keys taken at once %s after (TTL 1s)",
			multiTake, multiKeys, r.name, r.rounds.Load(), d, sum["acquired"], sum["written"], peak, sum["refused"], sum["lost"], sum["errors"], multiKeys, ms(back))
	})
}

// multiHold is a child: it takes the first Permits keys of scenario 20 at
// once, renewed, reports "held", and holds them until it is killed.
func multiHold(a semArgs) error {
	pool := newPool(a.Addr)
	defer pool.Close()
	r, err := semRegistry(a, pool, false)
	if err != nil {
		return err
	}
	defer r.Close()
	var keys []string
	for i := range a.Permits {
		keys = append(keys, multiKey(i))
	}
	le, err := r.AcquireAll(context.Background(), keys, 0)
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "held", "keys": len(le.Keys())})
	<-le.Lost()
	return fmt.Errorf("lost the keys while held")
}

func TestMultiKeyHolderKilled(t *testing.T) {
	const (
		ttl, idle = time.Second, 100 * time.Millisecond
		held      = 4
	)
	srv := startServer(t)
	h := spawn(t, "multihold", semArgs{Addr: srv.Addr, Prefix: "chaos20k", TTL: ttl, Permits: held})
	if ev := h.event(t, 10*time.Second, "held"); ev["keys"] != float64(held) {
		t.Fatalf("the holder holds %v keys, want %d", ev["keys"], held)
	}
	// A waiter on each key, a RedisLock of its own; a PubSubLock sleeps
	// until the key's TTL ends, a SpinLock polls.
	var waits []<-chan acquired
	for i := range held {
		lt := registry.PubSubLock
		if i%2 == 1 {
			lt = registry.SpinLock
		}
		r := newRegistry(t, newPool(srv.Addr), "chaos20k", registry.WithExpireAfter(ttl),
			registry.WithIdleBetweenTries(idle), registry.WithLockType(lt))
		l, err := r.Obtain(multiKey(i))
		mustNil(t, err)
		waits = append(waits, lockAsync(ctxFor(t, 10*time.Second), l, 0))
	}
	// Let the holder renew its keys at least once while they wait (the
	// first key's TTL goes up), and kill it a quarter of its TTL after a
	// renewal, as the lock's scenario 2 does (TTL / 2 after the take).
	pttl := func() int64 {
		left, _ := redis.Int64(do(t, srv.Addr, "PTTL", "chaos20k:"+multiKey(0)), nil)
		return left
	}
	prev := int64(ttl / time.Millisecond)
	waitFor(t, 5*time.Second, "the holder's renewal", func() bool {
		left := pttl()
		renewed := left > prev
		prev = left
		return renewed
	})
	waitFor(t, 5*time.Second, "a quarter of the TTL since a renewal", func() bool {
		return pttl() <= int64(ttl*3/4/time.Millisecond)
	})
	killed := mono()
	mustNil(t, h.cmd.Process.Kill())
	var last time.Duration
	for i, w := range waits {
		a := <-w
		mustNil(t, a.err)
		d := time.Duration(a.at - killed)
		if d <= 0 {
			t.Errorf("key %d: taken %v before the kill, while the holder held it", i, -d)
		}
		if d > ttl+idle+50*time.Millisecond {
			t.Errorf("key %d: taken %v after the kill, want at most TTL %v + poll %v", i, d, ttl, idle)
		}
		last = max(last, d)
	}
	figure(t, 20, "several keys at once: a holder of %d keys SIGKILLed (TTL %v, renewed): a waiter on each key got it, the last %s after the kill (bound TTL + poll %v)",
		held, ttl, ms(last), idle)
}
