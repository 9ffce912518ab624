package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// spec is one lockyard process's job.
type spec struct {
	Addr, Key, Type, Mode string
	Permits, Inflight     int
	Dur, Hold, TTL, Gap   time.Duration
	// End: how a loop's lease ends: "" (Release after Hold), "after"
	// (ReleaseAfter(Hold) at once), "try" (TryAcquire, retried after a
	// millisecond, then Release after Hold). HashTag: WithHashTag.
	End     string
	HashTag bool
	Floor   int // the floor contender's step (floor.go)
}

// lockyardCmd returns the contender command of lockyard with lock type t
// ("pubsub", "spin"; or "mixed": its processes in turn a PubSubLock, a
// SpinLock, a PubSubLock whose leases end with ReleaseAfter and a SpinLock
// that uses TryAcquire, all WithHashTag).
func lockyardCmd(self, t string) func(proc int, addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd {
	return func(proc int, addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd {
		sp := spec{Addr: addr, Key: key, Type: t, Mode: mode, Permits: sh.permits, Inflight: sh.inflight,
			Dur: dur, Hold: sh.hold, TTL: ttl, Gap: sh.gap}
		if step, ok := strings.CutPrefix(t, "floor"); ok {
			sp.Type, sp.Floor = "floor", len(step) // "floor", "floor+", "floor++", ...
		}
		if t == "mixed" {
			sp.Type, sp.End, sp.HashTag = [...]string{"pubsub", "spin", "pubsub", "spin"}[proc%4], [...]string{"", "", "after", "try"}[proc%4], true
		}
		b, _ := json.Marshal(sp)
		return exec.Command(self, "-worker", string(b))
	}
}

// mixedRole names the part of process proc in the "mixed" contender
// (lockyardCmd).
func mixedRole(proc int) string {
	return [...]string{"PubSubLock", "SpinLock", "PubSubLock, ReleaseAfter", "SpinLock, TryAcquire"}[proc%4]
}

// runWorker runs one lockyard process: loops of acquire, hold, release on
// one registry (its own pool, as a replica has), or one hold, or one
// acquisition.
func runWorker(js string) error {
	var sp spec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		return err
	}
	if sp.Type == "floor" {
		return runFloor(sp, os.Stdout)
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
	if sp.HashTag {
		opts = append(opts, registry.WithHashTag())
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
			fail := func(err error) {
				mu.Lock()
				first = err
				mu.Unlock()
			}
			for time.Now().Before(end) {
				t0 := time.Now()
				le, err := acquire(ctx, s, sp.End == "try", end)
				if err != nil {
					fail(err)
					return
				}
				if le == nil { // TryAcquire until the end of the run
					break
				}
				mine = append(mine, float64(time.Since(t0).Microseconds())/1000)
				if sp.End == "after" {
					err = le.ReleaseAfter(ctx, sp.Hold)
				} else {
					if sp.Hold > 0 {
						time.Sleep(sp.Hold)
					}
					err = le.Release(ctx)
				}
				if err != nil {
					fail(err)
					return
				}
				if sp.Gap > 0 {
					time.Sleep(sp.Gap)
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

// acquire gets a lease of s: with Acquire, or with TryAcquire retried
// every millisecond (try) until it succeeds or end passes (nil, nil).
func acquire(ctx context.Context, s *registry.Semaphore, try bool, end time.Time) (*registry.Lease, error) {
	if !try {
		return s.Acquire(ctx, 0)
	}
	for time.Now().Before(end) {
		le, err := s.TryAcquire(ctx, 0)
		if !errors.Is(err, registry.ErrNotObtained) {
			return le, err
		}
		time.Sleep(time.Millisecond)
	}
	return nil, nil
}
