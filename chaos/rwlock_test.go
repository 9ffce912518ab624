package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"golang.org/x/sys/unix"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 19: a read-write lock under faults. Three processes, each with a
// PubSubLock and a SpinLock registry of four goroutines, take the read side
// (80%) or the write side (20%) of one fenced RWLock and enter a resource
// that counts who is inside: a writer that enters beside anyone, or a
// reader beside a writer, is an overlap.
//   - no fault, CLIENT KILL of every client connection every 150 ms, and
//     SCRIPT FLUSH every 150 ms: no overlap, and afterwards a writer takes
//     the key within its TTL (every lease free);
//   - a reader SIGKILLed (TTL 1 s, renewed): a waiting writer gets in
//     within its TTL and a poll;
//   - a writer SIGSTOPped past its TTL: resumed, it sees Lost before its
//     next write, and that fenced write is refused.

// rwResSrc enters (ARGV[1] 'r' or 'w') the resource of a read-write lock,
// or leaves it (ARGV[2] '-'): KEYS readers inside, writers inside,
// overlaps.
const rwResSrc = `
local k = KEYS[1]
if ARGV[1] == 'w' then k = KEYS[2] end
if ARGV[2] == '-' then return redis.call('DECR', k) end
local r, w = tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(redis.call('GET', KEYS[2]) or '0')
if w > 0 or (ARGV[1] == 'w' and r > 0) then redis.call('INCR', KEYS[3]) end
return redis.call('INCR', k)`

var rwRes = redis.NewScript(3, rwResSrc)

func rwResKeys() []any { return []any{"rw:readers", "rw:writers", "rw:overlaps"} }

// rwContend is a child: two registries of four goroutines each take the
// read or the write side until Deadline, enter the resource while they hold
// it (unless Lost closed first), and report their counts.
func rwContend(a semArgs) error {
	pool, res := newPool(a.Addr), newPool(a.Res)
	defer pool.Close()
	defer res.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.Deadline)
	defer cancel()
	var reads, writes, lost, errs atomic.Int64
	err := fourEach(a, pool, func(r *registry.Registry) (func(), error) {
		l, err := r.RWLock("table")
		if err != nil {
			return nil, err
		}
		return func() {
			c := res.Get()
			defer c.Close()
			for ctx.Err() == nil {
				side, acquire := "r", l.AcquireRead
				if rand.IntN(5) == 0 {
					side, acquire = "w", l.AcquireWrite
				}
				le, err := acquire(ctx, 0)
				if err != nil {
					// A wait gives up at once when its next try would
					// come past the run's deadline: not an error.
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						errs.Add(1)
					}
					continue
				}
				select {
				case <-le.Lost(): // checked right before entering
					lost.Add(1)
				default:
					if _, err := rwRes.Do(c, append(rwResKeys(), side, "+")...); err != nil {
						errs.Add(1)
						break
					}
					time.Sleep(time.Duration(1+rand.IntN(2)) * time.Millisecond)
					_, _ = rwRes.Do(c, append(rwResKeys(), side, "-")...)
					if side == "w" {
						writes.Add(1)
					} else {
						reads.Add(1)
					}
				}
				countRelease(le, &lost, &errs)
			}
		}, nil
	})
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "done", "reads": reads.Load(), "writes": writes.Load(), "lost": lost.Load(), "errors": errs.Load()})
	return nil
}

// rwRun runs three contending processes for d while fault runs, and
// returns their summed counts and the resource's overlaps.
func rwRun(t *testing.T, srvAddr, resAddr, prefix string, d time.Duration, fault func(stop <-chan struct{})) (sum map[string]int64, overlaps int) {
	t.Helper()
	sum = runChildren(t, "rwcontend", semArgs{Addr: srvAddr, Res: resAddr, Prefix: prefix, TTL: time.Second, Deadline: d},
		fault, "reads", "writes", "lost", "errors")
	overlaps, _ = redis.Int(do(t, resAddr, "GET", "rw:overlaps"), nil)
	return sum, overlaps
}

// rwFree checks that a writer takes the key within ttl + 2s of the end of
// the faults: no lease is left held longer than its TTL.
func rwFree(t *testing.T, addr, prefix string, ttl time.Duration) time.Duration {
	t.Helper()
	return freeAfter(t, addr, prefix, ttl, func(ctx context.Context, r *registry.Registry) (*registry.Lease, error) {
		l, err := r.RWLock("table")
		if err != nil {
			return nil, err
		}
		return l.AcquireWrite(ctx, 0)
	})
}

func TestRWLockFaults(t *testing.T) {
	const d = 3 * time.Second
	underFaults(t, "chaos19", func(t *testing.T, r faultRun) {
		sum, overlaps := rwRun(t, r.srv.Addr, r.res.Addr, r.prefix, d, r.fault)
		if overlaps != 0 || sum["reads"] == 0 || sum["writes"] == 0 {
			t.Fatalf("%s: %v, %d overlaps", r.name, sum, overlaps)
		}
		back := rwFree(t, r.srv.Addr, r.prefix, time.Second)
		figure(t, 19, "read-write lock, 3 processes x 8 goroutines (80%% reads), %s (%d rounds), %v: %d reads, %d writes, %d overlaps, %d lost, %d errors; a writer got the key %s after (TTL 1s)",
			r.name, r.rounds.Load(), d, sum["reads"], sum["writes"], overlaps, sum["lost"], sum["errors"], ms(back))
	})
}

// rwHold is a child: it holds the read side (Permits 0) or the write side
// (Permits 1) of a fenced RWLock, renewed, until it sees Lost; then it
// writes to the fenced resource of scenario 18 once.
func rwHold(a semArgs) error {
	pool, res := newPool(a.Addr), newPool(a.Res)
	defer pool.Close()
	defer res.Close()
	r, err := semRegistry(a, pool, false)
	if err != nil {
		return err
	}
	defer r.Close()
	l, err := r.RWLock("table")
	if err != nil {
		return err
	}
	acquire := l.AcquireRead
	if a.Permits == 1 {
		acquire = l.AcquireWrite
	}
	le, err := acquire(context.Background(), 0)
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "held", "token": le.Token()})
	<-le.Lost()
	emit(map[string]any{"event": "lost", "at": mono()})
	c := res.Get()
	ok, err := redis.Int(semFence.Do(c, append(semFenceKeys(), le.Token(), 1)...))
	c.Close()
	emit(map[string]any{"event": "write", "accepted": ok == 1, "err": fmt.Sprint(err)})
	return nil
}

func TestRWLockCrash(t *testing.T) {
	t.Run("SIGKILL reader", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		const ttl, idle = time.Second, 20 * time.Millisecond
		h := spawn(t, "rwhold", semArgs{Addr: srv.Addr, Res: res.Addr, Prefix: "chaos19k", TTL: ttl})
		h.event(t, 10*time.Second, "held")
		time.Sleep(ttl / 2) // renewed at least once
		mustNil(t, h.cmd.Process.Kill())
		killed := time.Now()
		r := newRegistry(t, newPool(srv.Addr), "chaos19k", registry.WithFencing(), registry.WithIdleBetweenTries(idle))
		l, err := r.RWLock("table")
		mustNil(t, err)
		le, err := l.AcquireWrite(ctxFor(t, 10*time.Second), 0)
		mustNil(t, err)
		took := time.Since(killed)
		mustNil(t, le.Release(ctxFor(t, time.Second)))
		if took > ttl+idle+100*time.Millisecond {
			t.Fatalf("the writer got in %v after the reader was killed, want within TTL %v + poll %v", took, ttl, idle)
		}
		figure(t, 19, "read-write lock: a SIGKILLed reader (TTL %v, renewed); a waiting writer got in %s after the kill (bound TTL + poll %v)", ttl, ms(took), idle)
	})
	t.Run("SIGSTOP writer", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		const ttl = 900 * time.Millisecond
		h := spawn(t, "rwhold", semArgs{Addr: srv.Addr, Res: res.Addr, Prefix: "chaos19s", TTL: ttl, Permits: 1})
		h.event(t, 10*time.Second, "held")
		mustNil(t, h.cmd.Process.Signal(unix.SIGSTOP))
		r := newRegistry(t, newPool(srv.Addr), "chaos19s", registry.WithFencing())
		l, err := r.RWLock("table")
		mustNil(t, err)
		le, err := l.AcquireWrite(ctxFor(t, 10*time.Second), 0)
		mustNil(t, err)
		c := newPool(res.Addr).Get()
		ok, err := redis.Int(semFence.Do(c, append(semFenceKeys(), le.Token(), 1)...))
		c.Close()
		if err != nil || ok != 1 {
			t.Fatalf("the new writer's write: %d, %v", ok, err)
		}
		resumed := mono()
		mustNil(t, h.cmd.Process.Signal(unix.SIGCONT))
		lostAt := h.event(t, 5*time.Second, "lost")
		learned := time.Duration(int64(lostAt["at"].(float64)) - resumed)
		if w := h.event(t, 5*time.Second, "write"); w["accepted"] != false {
			t.Fatalf("the resumed writer's write was accepted: %v", w)
		}
		mustNil(t, le.Release(ctxFor(t, time.Second)))
		figure(t, 19, "read-write lock: a writer SIGSTOPped past its TTL (%v): resumed, it saw Lost %s after SIGCONT, and its fenced write was refused", ttl, ms(learned))
	})
}
