package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// Scenario 17: the wait queue under faults. Three registries (two
// PubSubLock, one SpinLock; fencing on) of three goroutines each take turns
// on two keys for 8s, while a saboteur, every 2ms, deletes a key of a
// queue, makes it another type, fills it with garbage, or hands the turn to
// a waiter that does not exist. Every acquisition is checked at the fenced
// resource and as an interval: no two overlap, no write is rejected, and
// every goroutine keeps getting the lock.
func TestQueueFaults(t *testing.T) {
	srv, res := startServer(t), startServer(t)
	const prefix, keys, dur = "chaos17", 2, 8 * time.Second
	type worker struct {
		l   *registry.RedisLock
		n   atomic.Int64
		key string
	}
	var ws []*worker
	for i, t0 := range []registry.LockType{registry.PubSubLock, registry.SpinLock, registry.PubSubLock} {
		r := newRegistry(t, newPool(srv.Addr), prefix, registry.WithFencing(), registry.WithLockType(t0),
			registry.WithIdleBetweenTries(20*time.Millisecond))
		for g := range 3 {
			key := fmt.Sprintf("k%d", (i+g)%keys)
			l, err := r.Obtain(key)
			mustNil(t, err)
			ws = append(ws, &worker{l: l, key: key})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		mu             sync.Mutex
		ivs            []interval
		lockErrs, errs atomic.Int64
		firstErr       atomic.Value
		wg             sync.WaitGroup
	)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newPool(res.Addr).Get()
			defer c.Close()
			for ctx.Err() == nil {
				if err := w.l.LockContext(ctx); err != nil {
					if errors.Is(err, context.DeadlineExceeded) {
						return // the end of the run (the lock can see the deadline before ctx's timer fires)
					}
					lockErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				iv := interval{Key: w.key, Token: w.l.Token(), Acquired: mono()}
				if ok, err := (resource{res.Addr}).enter(c, w.key, iv.Token); err != nil || !ok {
					errs.Add(1)
				} else {
					time.Sleep(200 * time.Microsecond)
					if err := (resource{res.Addr}).leave(c, w.key); err != nil {
						errs.Add(1)
					}
				}
				iv.Released = mono()
				if err := w.l.UnlockContext(context.Background()); err != nil {
					errs.Add(1)
				}
				w.n.Add(1)
				mu.Lock()
				ivs = append(ivs, iv)
				mu.Unlock()
			}
		}()
	}
	var faults atomic.Int64
	wg.Add(1)
	go func() { // the saboteur
		defer wg.Done()
		c, err := redis.Dial("tcp", srv.Addr)
		if err != nil {
			errs.Add(1)
			return
		}
		defer c.Close()
		w := wire.Layout{Registry: prefix}
		for i := 0; ctx.Err() == nil; i++ {
			lk := w.LockKey(fmt.Sprintf("k%d", i%keys))
			q, info, turn, polls := w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk)
			switch i % 6 {
			case 0:
				_, err = c.Do("DEL", q, info, turn, polls)
			case 1:
				_, err = c.Do("EVAL", "redis.call('DEL', KEYS[1]) return redis.call('SET', KEYS[1], 'a string')", 1, q)
			case 2:
				_, err = c.Do("EVAL", "redis.call('DEL', KEYS[1]) return redis.call('LPUSH', KEYS[1], 'a list')", 1, info)
			case 3:
				_, err = c.Do("ZADD", q, 0, fmt.Sprint("ghost/", i), 1, "garbage")
				if err == nil {
					_, err = c.Do("HSET", info, "garbage", "not an entry")
				}
			case 4:
				_, err = c.Do("SET", turn, fmt.Sprint("ghost/", i), "PX", 50)
			case 5:
				_, err = c.Do("EVAL", "redis.call('DEL', KEYS[1]) return redis.call('HSET', KEYS[1], 'f', 'v')", 1, turn)
			}
			if err == nil { // a key the last fault made another type refuses this one: no fault
				faults.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	bad := overlaps(ivs)
	least := int64(-1)
	for _, w := range ws {
		if least < 0 || w.n.Load() < least {
			least = w.n.Load()
		}
	}
	peak, rejected := 0, 0
	for k := range keys {
		p, r := resource{res.Addr}.stats(t, fmt.Sprintf("k%d", k))
		peak, rejected = max(peak, p), rejected+r
	}
	if len(bad) > 0 || peak > 1 || rejected > 0 {
		t.Errorf("%d overlapping intervals, peak occupancy %d, %d fenced writes rejected", len(bad), peak, rejected)
	}
	if least < 1 || lockErrs.Load() > 0 || errs.Load() > 0 {
		t.Errorf("the goroutine that got the lock least got it %d times; %d lock errors (the first: %v), %d other errors",
			least, lockErrs.Load(), firstErr.Load(), errs.Load())
	}
	figure(t, 17, "%d acquisitions by 9 goroutines of 3 registries on %d keys in %v under %d faults of the wait queue (-race: %v): %d overlaps, %d fenced writes rejected, peak occupancy %d, fewest by one goroutine %d, %d lock errors",
		len(ivs), keys, dur, faults.Load(), raceEnabled, len(bad), rejected, peak, least, lockErrs.Load())
}
