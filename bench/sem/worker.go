package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// spec is one lockyard process's job.
type spec struct {
	Addr, Key, Type, Mode string
	Permits, Inflight     int
	Dur, Hold, TTL        time.Duration
}

// lockyardCmd returns the contender command of lockyard with lock type t.
func lockyardCmd(self, t string) func(addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd {
	return func(addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd {
		b, _ := json.Marshal(spec{Addr: addr, Key: key, Type: t, Mode: mode, Permits: sh.permits, Inflight: sh.inflight,
			Dur: dur, Hold: sh.hold, TTL: ttl})
		return exec.Command(self, "-worker", string(b))
	}
}

// runWorker runs one lockyard process: loops of acquire, hold, release on
// one registry (its own pool, as a replica has), or one hold, or one
// acquisition.
func runWorker(js string) error {
	var sp spec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		return err
	}
	pool := &redigo.Pool{MaxIdle: sp.Inflight + 2, Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", sp.Addr) }}
	defer pool.Close()
	lt := registry.SpinLock
	if sp.Type == "pubsub" {
		lt = registry.PubSubLock
	}
	opts := []registry.Option{registry.WithLockType(lt), registry.WithAutoRenew(), registry.WithExpireAfter(sp.TTL)}
	if lt == registry.SpinLock {
		opts = append(opts, registry.WithIdleBetweenTries(10*time.Millisecond)) // the peer's retryInterval
	}
	reg, err := registry.New(pool, "bench", opts...)
	if err != nil {
		return err
	}
	defer reg.Close()
	s, err := reg.Semaphore(sp.Key, sp.Permits)
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch sp.Mode {
	case "hold":
		// A warm-up acquisition first: the measured one runs on a warm
		// connection, as a long-running holder's does.
		le, err := s.Acquire(ctx, 0)
		if err != nil {
			return err
		}
		if err := le.Release(ctx); err != nil {
			return err
		}
		if _, err := s.Acquire(ctx, 0); err != nil {
			return err
		}
		fmt.Println("held", time.Now().UnixMicro())
		select {} // until killed
	case "once":
		le, err := s.Acquire(ctx, 0)
		if err != nil {
			return err
		}
		fmt.Println(time.Now().UnixMicro()) // when the permit was taken (bench crash)
		return le.Release(ctx)
	}
	var (
		mu    sync.Mutex
		waits []float64
		wg    sync.WaitGroup
		first error
	)
	end := time.Now().Add(sp.Dur)
	for range sp.Inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for time.Now().Before(end) {
				t0 := time.Now()
				le, err := s.Acquire(ctx, 0)
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
				if sp.Hold > 0 {
					time.Sleep(sp.Hold)
				}
				if err := le.Release(ctx); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return json.NewEncoder(os.Stdout).Encode(report{Acquisitions: len(waits), Waits: waits})
}
