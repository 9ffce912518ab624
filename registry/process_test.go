package registry_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Child processes are this test binary re-executed with these variables.
const (
	childEnv       = "LOCKYARD_TEST_CHILD" // the child's job: "counter" or "fence"
	childAddrEnv   = "LOCKYARD_TEST_ADDR"
	childPrefixEnv = "LOCKYARD_TEST_PREFIX"
	childItersEnv  = "LOCKYARD_TEST_ITERS"
)

const (
	childGoroutines = 4
	counterKey      = "counter"
)

// runChild is the body of a child process; it returns the exit code.
func runChild() int {
	if os.Getenv(childEnv) == "semhold" {
		return semHolder()
	}
	iters, _ := strconv.Atoi(os.Getenv(childItersEnv))
	pool := redistest.NewPool(os.Getenv(childAddrEnv))
	defer pool.Close()
	fence := os.Getenv(childEnv) == "fence"
	opts := []registry.Option{registry.WithIdleBetweenTries(2 * time.Millisecond)}
	if fence {
		opts = append(opts, registry.WithFencing())
	}
	r, err := registry.New(pool, os.Getenv(childPrefixEnv), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer r.Close()
	l, err := r.Obtain("shared")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var (
		wg     sync.WaitGroup
		failed sync.Once
		code   int
	)
	for range childGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iters {
				l.Lock()
				var err error
				if fence { // printed under the lock: lines come out in token order
					_, err = fmt.Println(l.Token())
				} else {
					err = incrementNonAtomically(pool, os.Getenv(childPrefixEnv)+":"+counterKey)
				}
				l.Unlock()
				if err != nil {
					failed.Do(func() { fmt.Fprintln(os.Stderr, err); code = 1 })
					return
				}
			}
		}()
	}
	wg.Wait()
	return code
}

// incrementNonAtomically reads, then writes: it loses updates unless callers
// are mutually exclusive.
func incrementNonAtomically(pool *redis.Pool, key string) error {
	c := pool.Get()
	defer c.Close()
	n, err := redis.Int(c.Do("GET", key))
	if err != nil && err != redis.ErrNil {
		return err
	}
	_, err = c.Do("SET", key, n+1)
	return err
}

// childCmd returns the command of a child process (this test binary
// re-executed) that does job on the server at addr; its stderr is ours.
func childCmd(job, addr, prefix string, iters int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+job, childAddrEnv+"="+addr,
		childPrefixEnv+"="+prefix, childItersEnv+"="+strconv.Itoa(iters))
	cmd.Stderr = os.Stderr
	return cmd
}

// Mutual exclusion across OS processes: a GET/SET counter comes out exact.
func TestCrossProcessMutualExclusion(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	const procs, iters = 3, 40
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = childCmd("counter", b.addr, pfx, iters)
		mustNil(t, cmds[i].Start())
	}
	for _, cmd := range cmds {
		mustNil(t, cmd.Wait())
	}
	got, err := redis.Int(b.do(t, "GET", pfx+":"+counterKey), nil)
	mustNil(t, err)
	if want := procs * childGoroutines * iters; got != want {
		t.Fatalf("counter = %d, want %d: mutual exclusion was violated", got, want)
	}
}
