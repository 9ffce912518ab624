// Command fencing shows why a lock alone cannot protect storage from a
// holder that was paused past its TTL, and how a fencing token does.
//
// Holder A takes the lock (token N: a key's first token is the Redis
// server's clock in microseconds) and pauses, as a GC pause or a stopped VM
// would. Its lock expires; holder B takes it (token N+1) and writes. Then A
// resumes and writes too: the storage rejects A's write, because its token
// is lower than one it has already seen.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// guardedWrite is the storage side: it accepts a write only with a fencing
// token greater than every token it has seen for the record.
var guardedWrite = redis.NewScript(2, `
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) <= last then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

const ttl = 200 * time.Millisecond

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mr.Close()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", mr.Addr()) }}
	defer pool.Close()

	a, err := holder(pool)
	if err != nil {
		return err
	}
	b, err := holder(pool)
	if err != nil {
		return err
	}
	a.Lock()
	fmt.Fprintln(w, "A holds the lock with token", a.Token())

	<-a.Lost()          // A is paused; its validity ends...
	mr.FastForward(ttl) // ...and Redis expires its key
	fmt.Fprintln(w, "A is paused past its TTL: lost")

	b.Lock()
	fmt.Fprintln(w, "B holds the lock with token", b.Token())
	report(w, "B", pool, "written by B", b.Token())
	b.Unlock()

	report(w, "A (resumed)", pool, "written by A", a.Token())
	if err := a.UnlockContext(context.Background()); err != nil {
		fmt.Fprintln(w, "A's unlock:", err)
	}
	return nil
}

// holder returns the lock on the record from a registry of its own, as a
// separate process would have.
func holder(pool *redis.Pool) (*registry.RedisLock, error) {
	reg, err := registry.New(pool, "records", registry.WithFencing(), registry.WithExpireAfter(ttl))
	if err != nil {
		return nil, err
	}
	return reg.Obtain("record-7")
}

func report(w io.Writer, who string, pool *redis.Pool, value string, token int64) {
	c := pool.Get()
	defer c.Close()
	ok, err := redis.Bool(guardedWrite.Do(c, "record-7", "record-7:last-token", value, token))
	switch {
	case err != nil:
		fmt.Fprintf(w, "%s's write failed: %v\n", who, err)
	case ok:
		fmt.Fprintf(w, "%s writes with token %d: accepted\n", who, token)
	default:
		fmt.Fprintf(w, "%s writes with token %d: rejected (stale token)\n", who, token)
	}
}
