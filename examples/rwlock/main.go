// Command rwlock keeps a price list consistent for many readers while a
// writer rewrites it now and then: the list is two Redis keys (a price and
// its tax-included twin) that the writer sets one after the other, so a
// reader that looks in between sees a torn pair. Each replica (a registry
// with its own connection pool, as a process would have) runs reader
// goroutines, and one replica writes. Without a lock readers see torn
// pairs; with a lockyard RWLock they never do, they read side by side,
// and the writer is not starved by them. The writer's last update uses
// Lease.Downgrade: it reads back what it wrote, beside the readers, with
// no other writer in between.
//
// It starts an embedded Redis (miniredis) on a loopback port, or uses the
// server at REDIS_ADDR when that is set, and prints a table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

type config struct {
	replicas, readers, writes int
	gap                       time.Duration // between the writer's two SETs
}

// defaults is the demo as the README shows it.
var defaults = config{replicas: 3, readers: 4, writes: 10, gap: 2 * time.Millisecond}

func main() {
	var c config
	flag.IntVar(&c.replicas, "replicas", defaults.replicas, "replicas (registries)")
	flag.IntVar(&c.readers, "readers", defaults.readers, "reader goroutines per replica")
	flag.IntVar(&c.writes, "writes", defaults.writes, "updates of the price list")
	flag.DurationVar(&c.gap, "gap", defaults.gap, "time between the writer's two SETs")
	flag.Parse()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			fmt.Fprintln(os.Stderr, "rwlock:", err)
			os.Exit(1)
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	if err := run(os.Stdout, addr, c); err != nil {
		fmt.Fprintln(os.Stderr, "rwlock:", err)
		os.Exit(1)
	}
}

// result is one round: reads made, torn pairs seen, the most readers
// inside at once, and the writer's longest wait.
type result struct {
	reads, torn, most int64
	longest           time.Duration
}

func run(w io.Writer, addr string, c config) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ROUND\tREADS\tTORN READS\tMOST READERS AT ONCE\tWRITES\tWRITER'S LONGEST WAIT\n")
	for _, locked := range []bool{false, true} {
		res, err := round(addr, locked, c)
		if err != nil {
			return err
		}
		name, wait := "no lock", "-"
		if locked {
			name, wait = "RWLock", res.longest.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\n", name, res.reads, res.torn, res.most, c.writes, wait)
	}
	return tw.Flush()
}

// round runs the readers until the writer has made its updates.
func round(addr string, locked bool, c config) (result, error) {
	prefix := fmt.Sprintf("rwlock-%d", time.Now().UnixNano())
	price, gross := prefix+":price", prefix+":gross"
	var (
		res          result
		inside       atomic.Int64
		wg           sync.WaitGroup
		errMu        sync.Mutex
		firstErr     error
		ctx, stopAll = context.WithTimeout(context.Background(), time.Minute)
	)
	defer stopAll()
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
			stopAll()
		}
	}
	var locks []*registry.RWLock
	var pools []*redis.Pool
	for range c.replicas {
		pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }, MaxIdle: c.readers + 1}
		defer pool.Close()
		reg, err := registry.New(pool, prefix, registry.WithLockType(registry.PubSubLock))
		if err != nil {
			return res, err
		}
		defer reg.Close()
		l, err := reg.RWLock("price-list")
		if err != nil {
			return res, err
		}
		locks, pools = append(locks, l), append(pools, pool)
	}
	if err := set(pools[0], price, gross, 100, 0); err != nil {
		return res, err
	}
	done := make(chan struct{})
	for i, l := range locks {
		for range c.readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					case <-ctx.Done():
						return
					default:
					}
					var lease *registry.Lease
					if locked {
						var err error
						if lease, err = l.AcquireRead(ctx, 10*time.Second); err != nil {
							fail(err)
							return
						}
					}
					n := inside.Add(1)
					for m := atomic.LoadInt64(&res.most); n > m && !atomic.CompareAndSwapInt64(&res.most, m, n); m = atomic.LoadInt64(&res.most) {
					}
					torn, err := read(pools[i], price, gross)
					time.Sleep(time.Millisecond) // use what was read
					inside.Add(-1)
					if lease != nil {
						if rerr := lease.Release(ctx); rerr != nil && err == nil {
							err = rerr
						}
					}
					if err != nil {
						fail(err)
						return
					}
					atomic.AddInt64(&res.reads, 1)
					if torn {
						atomic.AddInt64(&res.torn, 1)
					}
				}
			}()
		}
	}
	var writer *registry.RWLock // nil: no lock
	if locked {
		writer = locks[0]
	}
	for n := range c.writes {
		time.Sleep(20 * time.Millisecond)
		if err := write(ctx, writer, pools[0], price, gross, 101+n, c.gap, n == c.writes-1, &res); err != nil {
			fail(err)
			break
		}
	}
	close(done)
	wg.Wait()
	return res, firstErr
}

// write sets the price list to p, holding the write side of l unless l is
// nil, and records the writer's longest wait in res. The last update downgrades its lease and reads back what
// it wrote beside the readers: no writer can change it in between.
func write(ctx context.Context, l *registry.RWLock, pool *redis.Pool, price, gross string, p int, gap time.Duration, last bool, res *result) error {
	var lease *registry.Lease
	if l != nil {
		start := time.Now()
		var err error
		if lease, err = l.AcquireWrite(ctx, 10*time.Second); err != nil {
			return err
		}
		res.longest = max(res.longest, time.Since(start))
	}
	if err := set(pool, price, gross, p, gap); err != nil {
		return errors.Join(err, release(ctx, lease))
	}
	if lease != nil && last {
		if err := lease.Downgrade(ctx); err != nil {
			return errors.Join(err, release(ctx, lease))
		}
		if torn, err := read(pool, price, gross); err != nil || torn {
			return errors.Join(err, fmt.Errorf("read back a torn pair after Downgrade"), release(ctx, lease))
		}
	}
	return release(ctx, lease)
}

func release(ctx context.Context, lease *registry.Lease) error {
	if lease == nil {
		return nil
	}
	return lease.Release(ctx)
}

// set writes price p, then, gap later, its tax-included twin.
func set(pool *redis.Pool, price, gross string, p int, gap time.Duration) error {
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("SET", price, p); err != nil {
		return err
	}
	time.Sleep(gap)
	_, err := c.Do("SET", gross, p*120/100)
	return err
}

// read reports whether the price list is torn: its twin is not the
// price's.
func read(pool *redis.Pool, price, gross string) (bool, error) {
	c := pool.Get()
	defer c.Close()
	v, err := redis.Strings(c.Do("MGET", price, gross))
	if err != nil {
		return false, err
	}
	p, err1 := strconv.Atoi(v[0])
	g, err2 := strconv.Atoi(v[1])
	if err := errors.Join(err1, err2); err != nil {
		return false, err
	}
	return g != p*120/100, nil
}
