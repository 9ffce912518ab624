// Command partnerapi caps the calls that several replicas make at once to a
// partner API that allows only a few: each replica (a registry with its own
// connection pool, as a process would have) runs many export goroutines,
// and each export holds one permit of a lockyard Semaphore while it calls
// the API. Without the semaphore the replicas exceed the partner's limit;
// with it they never do, and they keep it busy.
//
// It starts an embedded Redis (miniredis) on a loopback port, or uses the
// server at REDIS_ADDR when that is set, and prints a table.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

type config struct {
	replicas, exports, limit int
	call                     time.Duration // how long one API call takes
}

// defaults is the demo as make demo and the README show it.
var defaults = config{replicas: 3, exports: 8, limit: 4, call: 20 * time.Millisecond}

func main() {
	var c config
	flag.IntVar(&c.replicas, "replicas", defaults.replicas, "replicas (registries)")
	flag.IntVar(&c.exports, "exports", defaults.exports, "export goroutines per replica")
	flag.IntVar(&c.limit, "limit", defaults.limit, "calls the partner API allows at once")
	flag.DurationVar(&c.call, "call", defaults.call, "duration of one API call")
	flag.Parse()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			fmt.Fprintln(os.Stderr, "partnerapi:", err)
			os.Exit(1)
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	if err := run(os.Stdout, addr, c); err != nil {
		fmt.Fprintln(os.Stderr, "partnerapi:", err)
		os.Exit(1)
	}
}

// result is one round: the most calls the partner saw at once, and how
// many calls were made.
type result struct {
	capped      bool
	most, calls int
}

func run(w io.Writer, addr string, c config) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ROUND\tCALLS\tMOST AT ONCE\tPARTNER LIMIT\n")
	for _, capped := range []bool{false, true} {
		res, err := round(addr, capped, c)
		if err != nil {
			return err
		}
		name := "no semaphore"
		if capped {
			name = fmt.Sprintf("Semaphore(%d)", c.limit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", name, res.calls, res.most, c.limit)
	}
	return tw.Flush()
}

// round runs every export once. The partner API counts the calls in flight
// in Redis (INCR on entry, DECR on exit) and records the most it saw.
func round(addr string, capped bool, c config) (result, error) {
	prefix := fmt.Sprintf("partnerapi-%d", time.Now().UnixNano())
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for range c.replicas {
		pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }, MaxIdle: c.exports}
		defer pool.Close()
		reg, err := registry.New(pool, prefix, registry.WithLockType(registry.PubSubLock))
		if err != nil {
			return result{}, err
		}
		defer reg.Close()
		sem, err := reg.Semaphore("partner-api", c.limit)
		if err != nil {
			return result{}, err
		}
		for range c.exports {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if capped {
					permit, err := sem.Acquire(ctx, 10*time.Second)
					if err != nil {
						fail(err)
						return
					}
					defer permit.Release(context.Background())
				}
				if err := callPartner(pool, prefix, c.call); err != nil {
					fail(err)
				}
			}()
		}
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	conn, err := redis.Dial("tcp", addr)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	most, err := redis.Int(conn.Do("GET", prefix+":most"))
	if err != nil {
		return result{}, err
	}
	calls, err := redis.Int(conn.Do("GET", prefix+":calls"))
	return result{capped: capped, most: most, calls: calls}, err
}

// track counts a call in flight, and the most in flight at once.
var track = redis.NewScript(0, `
local now = redis.call('INCR', ARGV[1] .. ':now')
redis.call('INCR', ARGV[1] .. ':calls')
if now > tonumber(redis.call('GET', ARGV[1] .. ':most') or '0') then
  redis.call('SET', ARGV[1] .. ':most', now)
end
return now`)

// callPartner is the partner's API: it takes d, and counts itself.
func callPartner(pool *redis.Pool, prefix string, d time.Duration) error {
	c := pool.Get()
	defer c.Close()
	if _, err := track.Do(c, prefix); err != nil {
		return err
	}
	time.Sleep(d) // the call
	_, err := c.Do("DECR", prefix+":now")
	return err
}
