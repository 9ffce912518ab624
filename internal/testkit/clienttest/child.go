package clienttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// ChildEnv names the role in which a test binary re-executed by a test of
// this package runs; its parameters are in the LY_* variables. An adapter
// module's TestMain calls RunChild when it is set.
const ChildEnv = "LOCKYARD_CLIENTTEST_CHILD"

// RunChild runs the child role with a's clients and returns the process's
// exit status.
func RunChild(role string, a Adapter) int {
	switch role {
	case "contend":
		return contendChild(a)
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

// contendChild runs 2 registries x 4 goroutines, each making LY_ITER
// fenced, non-atomic increments of LY_PREFIX:cnt:{key} under the lock of
// key, on the cluster at LY_ADDRS. It prints RESULT acquisitions
// stale-tokens errors.
func contendChild(a Adapter) int {
	addrs := strings.Split(os.Getenv("LY_ADDRS"), ",")
	c, closeFn, err := a.Cluster(addrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer closeFn()
	direct := &redistest.Cluster{Addrs: addrs}
	keys := strings.Split(os.Getenv("LY_KEYS"), ",")
	iter, _ := strconv.Atoi(os.Getenv("LY_ITER"))
	var acq, stale, errs atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		reg, err := registry.NewWithClient(c, os.Getenv("LY_PREFIX"), registry.WithLogger(Quiet),
			registry.WithHashTag(), registry.WithFencing(), registry.WithLockType(registry.PubSubLock),
			registry.WithIdleBetweenTries(20*time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer reg.Close()
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range iter {
					key := keys[(g+n)%len(keys)]
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := reg.ExecuteLocked(ctx, key, func(ctx context.Context) error {
						l, err := reg.Obtain(key)
						if err != nil {
							return err
						}
						if !fencedIncrement(direct, os.Getenv("LY_PREFIX"), key, l.Token()) {
							stale.Add(1)
						}
						return nil
					})
					cancel()
					if err != nil {
						fmt.Fprintln(os.Stderr, "ExecuteLocked:", err)
						errs.Add(1)
						continue
					}
					acq.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	fmt.Printf("RESULT %d %d %d\n", acq.Load(), stale.Load(), errs.Load())
	return 0
}

// fencedIncrement adds 1 to prefix:cnt:{key} by a read, a pause and a
// write, so that two holders at once lose an update, and records token as
// the last seen in prefix:seen:{key}. It reports whether token was greater
// than the last.
func fencedIncrement(c *redistest.Cluster, prefix, key string, token int64) bool {
	cnt, seen := prefix+":cnt:{"+key+"}", prefix+":seen:{"+key+"}"
	v, err := redis.Int(c.DoKey(cnt, "GET", cnt))
	if err != nil && err != redis.ErrNil {
		return false
	}
	last, err := redis.Int64(c.DoKey(seen, "GET", seen))
	if err != nil && err != redis.ErrNil {
		return false
	}
	time.Sleep(200 * time.Microsecond) // widen the read-modify-write window
	_, _ = c.DoKey(cnt, "SET", cnt, v+1)
	_, _ = c.DoKey(seen, "SET", seen, token)
	return token > last
}

// spawn runs the test binary as n children in role with env, and returns
// their RESULT lines' fields summed.
func spawn(t *testing.T, n int, role string, env ...string) [3]int64 {
	t.Helper()
	type out struct {
		b   []byte
		err error
	}
	outs := make(chan out, n)
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), ChildEnv+"="+role), env...)
		cmd.Stderr = os.Stderr
		go func() {
			b, err := cmd.Output()
			outs <- out{b, err}
		}()
	}
	var sum [3]int64
	for range n {
		o := <-outs
		if o.err != nil {
			t.Fatalf("child: %v", o.err)
		}
		var a, b, c int64
		i := strings.Index(string(o.b), "RESULT")
		if i < 0 {
			t.Fatalf("child output %q has no RESULT line", o.b)
		}
		if _, err := fmt.Sscanf(string(o.b[i:]), "RESULT %d %d %d", &a, &b, &c); err != nil {
			t.Fatalf("child output %q: %v", o.b, err)
		}
		sum[0], sum[1], sum[2] = sum[0]+a, sum[1]+b, sum[2]+c
	}
	return sum
}
