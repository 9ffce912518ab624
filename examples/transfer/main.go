// Command transfer moves money between accounts from 4 replicas at once,
// each a process of its own: each transfer reads two balances, waits a
// little (a fraud check), and writes both back. Without a lock, transfers
// that share an account overwrite each other and the books no longer
// balance; with Registry.AcquireAll on both accounts they always do.
// Transfers lock their two accounts in whatever order they name them (from,
// to): opposite transfers never deadlock, and every one of them completes.
//
// It starts an embedded Redis (miniredis) on a loopback port, or uses the
// server at REDIS_ADDR when that is set, runs itself again once per
// replica, and prints a table.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
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

// replicaEnv, when set, makes this program a replica: it makes the
// transfers of the job that the variable holds (JSON) and prints its
// report as one JSON line.
const replicaEnv = "LOCKYARD_TRANSFER_REPLICA"

func main() {
	if js := os.Getenv(replicaEnv); js != "" {
		os.Exit(replicaMain(js))
	}
	var c config
	flag.IntVar(&c.replicas, "replicas", defaults.replicas, "replicas (processes, each with a registry)")
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

// round runs every replica's transfers, each replica a process of its
// own, and reads the books and the counters of the transfers afterwards.
func round(addr string, locked bool, c config) (result, error) {
	prefix := fmt.Sprintf("transfer-%d", time.Now().UnixNano())
	var res result
	admin := newPool(addr, 1)
	defer admin.Close()
	for i := range c.accounts {
		if err := do(admin, "SET", account(prefix, i), opening); err != nil {
			return res, err
		}
	}
	res.before = c.accounts * opening
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	js, err := json.Marshal(job{Addr: addr, Prefix: prefix, Locked: locked, Workers: c.workers,
		Accounts: c.accounts, Transfers: c.transfers, Check: c.check})
	if err != nil {
		return res, err
	}
	// A replica that hangs (a Redis that stopped answering) is killed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
	)
	for range c.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			cmd := exec.CommandContext(ctx, exe)
			cmd.Env = append(os.Environ(), replicaEnv+"="+string(js))
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			err := cmd.Run()
			var rep report
			lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) // the report is its last line
			if jerr := json.Unmarshal(lines[len(lines)-1], &rep); jerr != nil {
				err = errors.Join(err, fmt.Errorf("a replica's report %q: %w", out.String(), jerr))
			} else if rep.Err != "" {
				err = errors.Join(err, errors.New(rep.Err))
			}
			mu.Lock()
			defer mu.Unlock()
			errs = errors.Join(errs, err)
			res.transfers += rep.Transfers
			res.longest = max(res.longest, rep.Longest)
		}()
	}
	wg.Wait()
	if errs != nil {
		return res, errs
	}
	c0 := admin.Get()
	defer c0.Close()
	for i := range c.accounts {
		n, err := redis.Int(c0.Do("GET", account(prefix, i)))
		if err != nil {
			return res, err
		}
		res.after += n
	}
	for _, f := range []struct {
		key string
		n   *int64
	}{{prefix + ":most", &res.insideAtOnce}, {prefix + ":shared", &res.sharedAccounts}} {
		n, err := redis.Int64(c0.Do("GET", f.key))
		if err != nil && !errors.Is(err, redis.ErrNil) { // no counter: 0
			return res, err
		}
		*f.n = n
	}
	return res, nil
}

// newPool returns a pool of connections to addr whose commands time out
// after 10 s: a Redis that stops answering ends the demo with an error.
func newPool(addr string, idle int) *redis.Pool {
	return &redis.Pool{MaxIdle: idle, Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", addr, redis.DialConnectTimeout(5*time.Second),
			redis.DialReadTimeout(10*time.Second), redis.DialWriteTimeout(10*time.Second))
	}}
}

// account is account i's balance key.
func account(prefix string, i int) string { return fmt.Sprintf("%s:balance:%d", prefix, i) }

// job is what a replica does: Workers goroutines make Transfers transfers
// each between random accounts of Accounts, with AcquireAll if Locked.
type job struct {
	Addr, Prefix                 string
	Locked                       bool
	Workers, Accounts, Transfers int
	Check                        time.Duration
}

// report is what a replica did: its transfers, its longest wait for a
// pair of accounts, and its error.
type report struct {
	Transfers int64
	Longest   time.Duration
	Err       string
}

func replicaMain(js string) int {
	var j job
	err := json.Unmarshal([]byte(js), &j)
	var rep report
	if err == nil {
		rep, err = replica(j)
	}
	if err != nil {
		rep.Err = err.Error()
	}
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	if err != nil {
		return 1
	}
	return 0
}

// enter counts a transfer in (KEYS: its two accounts' counters, the
// transfers running, the most that ran at once, and the transfers that
// found an account in another one); leave counts it out.
var (
	enter = redis.NewScript(5, `
local x, y = redis.call('INCR', KEYS[1]), redis.call('INCR', KEYS[2])
if x > 1 or y > 1 then redis.call('INCR', KEYS[5]) end
local n = redis.call('INCR', KEYS[3])
if n > tonumber(redis.call('GET', KEYS[4]) or '0') then redis.call('SET', KEYS[4], n) end
return n`)
	leave = redis.NewScript(3, `
for _, k in ipairs(KEYS) do redis.call('DECR', k) end
return 0`)
)

// replica makes one process's transfers: a registry of its own, and
// j.Workers goroutines.
func replica(j job) (report, error) {
	var rep report
	pool := newPool(j.Addr, j.Workers+1)
	defer pool.Close()
	reg, err := registry.New(pool, j.Prefix, registry.WithLockType(registry.PubSubLock))
	if err != nil {
		return rep, err
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		wg              sync.WaitGroup
		errMu           sync.Mutex
		firstErr        error
		transfers, most atomic.Int64
	)
	fail := func(err error) {
		errMu.Lock()
		firstErr = errors.Join(firstErr, err)
		errMu.Unlock()
	}
	busy := func(i int) string { return fmt.Sprintf("%s:busy:%d", j.Prefix, i) }
	for range j.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range j.Transfers {
				from := rand.N(j.Accounts)
				to := (from + 1 + rand.N(j.Accounts-1)) % j.Accounts
				var lease *registry.Lease
				if j.Locked {
					start := time.Now()
					var err error
					// Both accounts at once, named in the transfer's own
					// order: no deadlock with the opposite one.
					if lease, err = reg.AcquireAll(ctx, []string{fmt.Sprint("account-", from), fmt.Sprint("account-", to)}, 10*time.Second); err != nil {
						fail(err)
						return
					}
					for d := int64(time.Since(start)); ; {
						if o := most.Load(); d <= o || most.CompareAndSwap(o, d) {
							break
						}
					}
				}
				err := counted(pool, enter, busy(from), busy(to), j.Prefix+":inside", j.Prefix+":most", j.Prefix+":shared")
				if err == nil {
					err = move(pool, account(j.Prefix, from), account(j.Prefix, to), 1+rand.N(50), j.Check)
					err = errors.Join(err, counted(pool, leave, busy(from), busy(to), j.Prefix+":inside"))
				}
				if lease != nil {
					err = errors.Join(err, lease.Release(ctx))
				}
				if err != nil {
					fail(err)
					return
				}
				transfers.Add(1)
			}
		}()
	}
	wg.Wait()
	rep.Transfers, rep.Longest = transfers.Load(), time.Duration(most.Load())
	return rep, firstErr
}

// counted runs enter or leave on keys.
func counted(pool *redis.Pool, s *redis.Script, keys ...string) error {
	c := pool.Get()
	defer c.Close()
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	_, err := s.Do(c, args...)
	return err
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
