package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// Scale figures (lockyard only: the peers have no lock cache and no
// watchdog).
const (
	cachedLocks = 100_000
	heldLocks   = 10_000
	renewTTL    = 1500 * time.Millisecond // renewal period renewTTL/3
	renewWindow = 4 * renewTTL / 3        // four renewal periods
)

var scaleCols = []string{"heap B/cached lock", "renew rt/period", "renew srv calls/s", "renew CPU ms/period", "held locks lost",
	"mixed TTL renew rt/s", "mixed TTL locks lost"}

// The mixed-TTL scenario: heldLocks locks taken with LockFor, their TTLs
// spread evenly over mixedMin to mixedMax, renewed by one watchdog.
const (
	mixedMin    = time.Second
	mixedMax    = 60 * time.Second
	mixedWindow = 4 * time.Second
)

// scale measures the memory of cached locks and the cost of renewing many
// held locks.
func (e *env) scale() (metrics, error) {
	e.runs++
	m := metrics{}
	b, err := cacheBytes(e.lock.Addr, e.runs)
	if err != nil {
		return nil, err
	}
	m["heap B/cached lock"] = b
	if err := e.renewals(m); err != nil {
		return nil, err
	}
	return m, e.mixedRenewals(m)
}

// cacheBytes is the heap growth per cached lock (key string included) after
// obtaining cachedLocks keys.
func cacheBytes(addr string, run int) (float64, error) {
	var ctr counter
	pool := redigoPool(addr, &ctr)
	defer pool.Close()
	keys := make([]string, cachedLocks)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%d:key-%06d", run, i)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	reg, err := registry.New(pool, "bench", registry.WithCacheCapacity(cachedLocks))
	if err != nil {
		return 0, err
	}
	defer reg.Close()
	for _, k := range keys {
		if _, err := reg.Obtain(k); err != nil {
			return 0, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(reg)
	return float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / cachedLocks, nil
}

// renewals holds heldLocks locks with auto-renew for renewWindow and counts
// the watchdog's round trips, server calls and CPU.
func (e *env) renewals(m metrics) error {
	var ctr counter
	pool := redigoPool(e.lock.Addr, &ctr)
	defer pool.Close()
	reg, err := registry.New(pool, fmt.Sprintf("bench-renew-%d", e.runs),
		registry.WithExpireAfter(renewTTL), registry.WithAutoRenew())
	if err != nil {
		return err
	}
	defer reg.Close()
	all, release, done, err := holdMany(reg, func(l *registry.RedisLock, _ int) error {
		return l.LockContext(context.Background())
	})
	if err != nil {
		close(release)
		<-done
		return err
	}
	w0, _ := ctr.snapshot()
	calls0, cpu0 := serverCalls(e.lock.Addr), cpuTime()
	time.Sleep(renewWindow) // the measurement window: the watchdog runs meanwhile
	w1, _ := ctr.snapshot()
	calls1, cpu1 := serverCalls(e.lock.Addr), cpuTime()
	periods := float64(renewWindow) / float64(renewTTL/3)
	m["renew rt/period"] = float64(w1-w0) / periods
	m["renew srv calls/s"] = float64(calls1-calls0) / renewWindow.Seconds()
	m["renew CPU ms/period"] = float64(cpu1-cpu0) / 1e6 / periods
	m["held locks lost"] = lostCount(all)
	close(release)
	<-done
	return nil
}

// mixedRenewals holds heldLocks locks with TTLs spread over mixedMin to
// mixedMax (LockFor) under one auto-renewing registry for mixedWindow, and
// counts the watchdog's round trips per second and the locks lost.
func (e *env) mixedRenewals(m metrics) error {
	var ctr counter
	pool := redigoPool(e.lock.Addr, &ctr)
	defer pool.Close()
	reg, err := registry.New(pool, fmt.Sprintf("bench-mixed-%d", e.runs), registry.WithAutoRenew())
	if err != nil {
		return err
	}
	defer reg.Close()
	ttl := func(i int) time.Duration {
		return mixedMin + time.Duration(i)*(mixedMax-mixedMin)/time.Duration(heldLocks-1)
	}
	all, release, done, err := holdMany(reg, func(l *registry.RedisLock, i int) error {
		return l.LockFor(context.Background(), ttl(i))
	})
	if err != nil {
		close(release)
		<-done
		return err
	}
	w0, _ := ctr.snapshot()
	time.Sleep(mixedWindow) // the measurement window: the watchdog runs meanwhile
	w1, _ := ctr.snapshot()
	m["mixed TTL renew rt/s"] = float64(w1-w0) / mixedWindow.Seconds()
	m["mixed TTL locks lost"] = lostCount(all)
	close(release)
	<-done
	return nil
}

// holdMany takes heldLocks locks of reg (keys k0...) with lock, in 8
// goroutines that hold them until release is closed, then unlock them and
// close done.
func holdMany(reg *registry.Registry, lock func(l *registry.RedisLock, i int) error) (all []*registry.RedisLock, release, done chan struct{}, err error) {
	const workers = 8
	held := make(chan []*registry.RedisLock, workers)
	release, done = make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() { // each goroutine locks and later unlocks its share
			defer wg.Done()
			var mine []*registry.RedisLock
			for i := w; i < heldLocks; i += workers {
				l, lerr := reg.Obtain(fmt.Sprintf("k%d", i))
				if lerr == nil {
					lerr = lock(l, i)
				}
				if lerr != nil {
					mu.Lock()
					err = lerr
					mu.Unlock()
					break
				}
				mine = append(mine, l)
			}
			held <- mine
			<-release
			for _, l := range mine {
				l.Unlock()
			}
		}()
	}
	for range workers {
		all = append(all, <-held...)
	}
	go func() { wg.Wait(); close(done) }()
	mu.Lock()
	defer mu.Unlock()
	return all, release, done, err
}

// lostCount counts the locks whose hold is lost.
func lostCount(all []*registry.RedisLock) float64 {
	n := 0.0
	for _, l := range all {
		select {
		case <-l.Lost():
			n++
		default:
		}
	}
	return n
}

// nested measures a reentrant acquire+release of a held lock: ns/op and
// allocs/op, with the Redis commands it sent (want 0).
func (e *env) nested() (metrics, error) {
	var ctr counter
	pool := redigoPool(e.lock.Addr, &ctr)
	defer pool.Close()
	reg, err := registry.New(pool, "bench-nested", registry.WithExpireAfter(ttl))
	if err != nil {
		return nil, err
	}
	defer reg.Close()
	e.runs++
	l, err := reg.Obtain(fmt.Sprintf("r%d", e.runs))
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	var lockErr error
	var cmds int64
	r := testing.Benchmark(func(b *testing.B) {
		// The benchmark runs in its own goroutine: the outer hold is taken
		// there, before b.Loop resets the timer and the counters.
		if lockErr = l.LockContext(ctx); lockErr != nil {
			return
		}
		defer l.Unlock()
		b.ReportAllocs()
		_, c0 := ctr.snapshot()
		for b.Loop() {
			_ = l.LockContext(ctx)
			_ = l.UnlockContext(ctx)
		}
		_, c1 := ctr.snapshot()
		cmds = c1 - c0
	})
	if lockErr != nil {
		return nil, lockErr
	}
	return metrics{"nested ns/op": float64(r.NsPerOp()), "nested allocs/op": float64(r.AllocsPerOp()), "nested cmds": float64(cmds)}, nil
}
