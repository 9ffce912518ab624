// Command transfer moves money between accounts from 4 replicas at once:
// each transfer reads two balances, waits a little (a fraud check), and
// writes both back. Without a lock, transfers that share an account
// overwrite each other and the books no longer balance; with
// Registry.AcquireAll on both accounts they always do. Transfers lock their
// two accounts in whatever order they name them (from, to): opposite
// transfers never deadlock, and every one of them completes.
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
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

type config struct {
	replicas, workers, accounts, transfers int
	check                                  time.Duration // between the reads and the writes
}

// defaults is the demo as the README shows it.
var defaults = config{replicas: 4, workers: 2, accounts: 6, transfers: 40, check: time.Millisecond}

// opening is each account's opening balance.
const opening = 1000

func main() {
	var c config
	flag.IntVar(&c.replicas, "replicas", defaults.replicas, "replicas (registries)")
	flag.IntVar(&c.workers, "workers", defaults.workers, "goroutines per replica")
	flag.IntVar(&c.accounts, "accounts", defaults.accounts, "accounts")
	flag.IntVar(&c.transfers, "transfers", defaults.transfers, "transfers per goroutine")
	flag.DurationVar(&c.check, "check", defaults.check, "time between reading the balances and writing them")
	flag.Parse()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			fmt.Fprintln(os.Stderr, "transfer:", err)
			os.Exit(1)
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	if err := run(os.Stdout, addr, c); err != nil {
		fmt.Fprintln(os.Stderr, "transfer:", err)
		os.Exit(1)
	}
}

// result is one round: the transfers made, the money in the books before
// and after, and the longest wait for a pair of accounts.
type result struct {
	transfers      int64
	before, after  int
	longest        time.Duration
	insideAtOnce   int64 // the most transfers running at once
	sharedAccounts int64 // transfers that found one of their accounts in another running transfer
}

func run(w io.Writer, addr string, c config) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ROUND\tTRANSFERS\tMONEY BEFORE\tMONEY AFTER\tBALANCED\tACCOUNT IN TWO TRANSFERS AT ONCE\tMOST TRANSFERS AT ONCE\tLONGEST WAIT\n")
	for _, locked := range []bool{false, true} {
		res, err := round(addr, locked, c)
		if err != nil {
			return err
		}
		name, wait := "no lock", "-"
		if locked {
			name, wait = "AcquireAll", res.longest.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%d\t%d\t%s\n", name, res.transfers, res.before, res.after, res.before == res.after,
			res.sharedAccounts, res.insideAtOnce, wait)
	}
	return tw.Flush()
}

// round runs every replica's transfers.
func round(addr string, locked bool, c config) (result, error) {
	prefix := fmt.Sprintf("transfer-%d", time.Now().UnixNano())
	account := func(i int) string { return fmt.Sprintf("%s:balance:%d", prefix, i) }
	var res result
	admin := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
	defer admin.Close()
	for i := range c.accounts {
		if err := do(admin, "SET", account(i), opening); err != nil {
			return res, err
		}
	}
	res.before = c.accounts * opening
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
		inside   atomic.Int64
		busy     = make([]atomic.Int32, c.accounts) // transfers running on each account
		longest  atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range c.replicas {
		pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }, MaxIdle: c.workers + 1}
		defer pool.Close()
		reg, err := registry.New(pool, prefix, registry.WithLockType(registry.PubSubLock))
		if err != nil {
			return res, err
		}
		defer reg.Close()
		for range c.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range c.transfers {
					from := rand.N(c.accounts)
					to := (from + 1 + rand.N(c.accounts-1)) % c.accounts
					var lease *registry.Lease
					if locked {
						start := time.Now()
						var err error
						// Both accounts at once, named in the transfer's
						// own order: no deadlock with the opposite one.
						if lease, err = reg.AcquireAll(ctx, []string{fmt.Sprint("account-", from), fmt.Sprint("account-", to)}, 10*time.Second); err != nil {
							errMu.Lock()
							firstErr = errors.Join(firstErr, err)
							errMu.Unlock()
							return
						}
						for d := int64(time.Since(start)); d > longest.Load(); {
							if longest.CompareAndSwap(longest.Load(), d) {
								break
							}
						}
					}
					n := inside.Add(1)
					for m := atomic.LoadInt64(&res.insideAtOnce); n > m && !atomic.CompareAndSwapInt64(&res.insideAtOnce, m, n); m = atomic.LoadInt64(&res.insideAtOnce) {
					}
					if x, y := busy[from].Add(1), busy[to].Add(1); x > 1 || y > 1 {
						atomic.AddInt64(&res.sharedAccounts, 1)
					}
					err := move(pool, account(from), account(to), 1+rand.N(50), c.check)
					busy[from].Add(-1)
					busy[to].Add(-1)
					inside.Add(-1)
					if lease != nil {
						err = errors.Join(err, lease.Release(ctx))
					}
					if err != nil {
						errMu.Lock()
						firstErr = errors.Join(firstErr, err)
						errMu.Unlock()
						return
					}
					atomic.AddInt64(&res.transfers, 1)
				}
			}()
		}
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	res.longest = time.Duration(longest.Load())
	for i := range c.accounts {
		n, err := redis.Int(admin.Get().Do("GET", account(i)))
		if err != nil {
			return res, err
		}
		res.after += n
	}
	return res, nil
}

// move reads both balances, waits check, and writes them back with sum
// moved from one to the other: a read-modify-write that a concurrent
// transfer on either account spoils unless both are locked.
func move(pool *redis.Pool, from, to string, sum int, check time.Duration) error {
	c := pool.Get()
	defer c.Close()
	a, err := redis.Int(c.Do("GET", from))
	if err != nil {
		return err
	}
	b, err := redis.Int(c.Do("GET", to))
	if err != nil {
		return err
	}
	time.Sleep(check)
	if _, err := c.Do("SET", from, a-sum); err != nil {
		return err
	}
	_, err = c.Do("SET", to, b+sum)
	return err
}

func do(pool *redis.Pool, cmd string, args ...any) error {
	c := pool.Get()
	defer c.Close()
	_, err := c.Do(cmd, args...)
	return err
}
