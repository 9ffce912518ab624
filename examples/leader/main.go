// Command leader shows leader election among the replicas of a service:
// each replica campaigns for one key; the leader works until it loses the
// lease or shuts down, then resigns, and another replica takes over. The
// leader's writes carry its fencing token, so that storage rejects a late
// write from a leader that was paused past its TTL.
//
// With -addr (or REDIS_ADDR), it runs as one replica against that Redis and
// prints one line per event (lead, write, lost, resign) until SIGINT or
// SIGTERM; start several to watch a failover, or kill -STOP the leader.
// Without, it runs three replicas in this process on an embedded Redis,
// each leading for three writes before it resigns.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/election"
	"github.com/lockyard/lockyard/registry"
)

// fencedWrite is the storage side: it appends a record only with a fencing
// token no lower than every token it has seen (a leader writes many times
// with its token; a later leader's is higher).
var fencedWrite = redis.NewScript(2, `
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < last then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[1], ARGV[2])
return 1
`)

func main() {
	addr := flag.String("addr", os.Getenv("REDIS_ADDR"), "Redis address; empty: a demo of three replicas on an embedded Redis")
	name := flag.String("name", "replica", "this replica's name, in the ledger")
	ttl := flag.Duration("ttl", time.Second, "the leader's lease TTL: a dead leader is replaced within about ttl")
	every := flag.Duration("every", 20*time.Millisecond, "how often the leader writes")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *addr == "" {
		err = demo(ctx, os.Stdout)
	} else {
		err = replica(ctx, os.Stdout, *addr, *name, *ttl, *every, 0)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

// replica campaigns until ctx ends, leading each time it wins; with terms >
// 0 it resigns after that many writes per term.
func replica(ctx context.Context, w io.Writer, addr, name string, ttl, every time.Duration, terms int) error {
	pool := &redis.Pool{
		MaxIdle: 4,
		Dial:    func() (redis.Conn, error) { return redis.Dial("tcp", addr) },
	}
	defer pool.Close()
	reg, err := registry.New(pool, "leader-demo",
		registry.WithAutoRenew(), registry.WithFencing(), registry.WithLockType(registry.PubSubLock))
	if err != nil {
		return err
	}
	defer reg.Close()
	e, err := election.New(reg, "leader", ttl)
	if err != nil {
		return err
	}
	return e.Run(ctx, func(ctx context.Context, le *registry.Lease) error {
		return lead(ctx, w, pool, name, le, every, terms)
	})
}

// lead works while this replica leads: a fenced write every interval,
// after checking that the lease is not lost. It returns when the lease is
// lost, ctx ends, or after max writes (0: no limit).
func lead(ctx context.Context, w io.Writer, pool *redis.Pool, name string, le *registry.Lease, every time.Duration, max int) error {
	fmt.Fprintf(w, "%s lead %d\n", name, le.Token())
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; max == 0 || n < max; n++ {
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), registry.ErrLockLost) {
				fmt.Fprintf(w, "%s lost %d\n", name, le.Token())
			}
			return nil
		case <-tick.C:
		}
		select {
		case <-le.Lost(): // checked before every write: a resumed leader stops here
			fmt.Fprintf(w, "%s lost %d\n", name, le.Token())
			return nil
		default:
		}
		if err := write(ctx, w, pool, name, le.Token()); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "%s resign %d\n", name, le.Token())
	return nil
}

// write appends one record to the ledger with the leader's token.
func write(ctx context.Context, w io.Writer, pool *redis.Pool, name string, token int64) error {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ok, err := redis.Bool(fencedWrite.Do(c, "leader-demo:ledger", "leader-demo:last-token", token, fmt.Sprintf("%s %d", name, token)))
	switch {
	case err != nil:
		return err
	case ok:
		fmt.Fprintf(w, "%s write %d accepted\n", name, token)
	default:
		fmt.Fprintf(w, "%s write %d rejected\n", name, token)
	}
	return nil
}

// demo runs three replicas on an embedded Redis until three terms, of
// three writes each, are done.
func demo(ctx context.Context, w io.Writer) error {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mr.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan string)
	errs := make(chan error, 3)
	for _, name := range []string{"replica-a", "replica-b", "replica-c"} {
		go func() {
			errs <- replica(ctx, lineWriter{ctx.Done(), lines}, mr.Addr(), name, time.Second, 10*time.Millisecond, 3)
		}()
	}
	for resigned := 0; resigned < 3; {
		select {
		case line := <-lines:
			fmt.Fprint(w, line)
			if isResign(line) {
				resigned++
			}
		case err := <-errs:
			return err // the others end with ctx
		}
	}
	cancel()
	for done := 0; done < 3; {
		select {
		case <-lines: // a replica's last lines, after the demo
		case err := <-errs:
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			done++
		}
	}
	return nil
}

// lineWriter sends each write, one line, on lines until done is closed.
type lineWriter struct {
	done  <-chan struct{}
	lines chan<- string
}

func (l lineWriter) Write(p []byte) (int, error) {
	select {
	case l.lines <- string(p):
	case <-l.done:
	}
	return len(p), nil
}

func isResign(line string) bool {
	var name string
	var token int64
	n, _ := fmt.Sscanf(line, "%s resign %d", &name, &token)
	return n == 2
}
