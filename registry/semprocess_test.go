package registry_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// fencedWrite stores token at key unless a higher token is stored: the
// storage a fenced holder writes to. It reports whether the write was
// accepted.
var fencedWrite = redis.NewScript(1, `
if tonumber(redis.call('GET', KEYS[1]) or '0') > tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// semHolder is a child process that holds a permit of a fenced semaphore
// (ttl: LOCKYARD_TEST_ITERS ms, not renewed) and writes its token to the
// fenced store every 50ms, checking Lost before each write. It prints
// "held TOKEN", "tick" after each write, then "lost" when Lost closes,
// then tries one more write and prints "rejected" or "accepted".
func semHolder() int {
	ttl, _ := strconv.Atoi(os.Getenv(childItersEnv))
	pfx := os.Getenv(childPrefixEnv)
	pool := redistest.NewPool(os.Getenv(childAddrEnv))
	defer pool.Close()
	r, err := registry.New(pool, pfx, registry.WithFencing())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer r.Close()
	s, err := r.Semaphore("sem", 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	le, err := s.Acquire(context.Background(), time.Duration(ttl)*time.Millisecond)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("held", le.Token())
	write := func() bool {
		c := pool.Get()
		defer c.Close()
		ok, err := redis.Int(fencedWrite.Do(c, pfx+":store", le.Token()))
		return err == nil && ok == 1
	}
	for {
		select {
		case <-le.Lost():
			fmt.Println("lost")
			if write() {
				fmt.Println("accepted")
			} else {
				fmt.Println("rejected")
			}
			return 0
		default:
		}
		if !write() {
			fmt.Println("rejected while held")
			return 1
		}
		fmt.Println("tick") // then sleeps: a good moment to stop it
		time.Sleep(50 * time.Millisecond)
	}
}

// startSemHolder starts a semHolder child and returns it with its output,
// once it holds its permit, and that permit's token.
func startSemHolder(t *testing.T, addr, pfx string, ttl time.Duration) (*os.Process, *bufio.Scanner, int64) {
	t.Helper()
	cmd := childCmd("semhold", addr, pfx, int(ttl/time.Millisecond))
	out, err := cmd.StdoutPipe()
	mustNil(t, err)
	mustNil(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "held ") {
		t.Fatalf("child: %q, want held TOKEN", lines.Text())
	}
	token, err := strconv.ParseInt(strings.TrimPrefix(lines.Text(), "held "), 10, 64)
	mustNil(t, err)
	return cmd.Process, lines, token
}

// A SIGKILLed holder's permit comes back within its TTL and one poll.
func TestSemaphoreKilledHolder(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	const ttl, idle = 500 * time.Millisecond, 100 * time.Millisecond
	proc, _, _ := startSemHolder(t, b.addr, pfx, ttl)
	mustNil(t, proc.Signal(syscall.SIGKILL))
	killed := time.Now()
	s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithFencing(), registry.WithIdleBetweenTries(idle)), "sem", 1)
	le, err := s.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
	mustNil(t, err)
	took := time.Since(killed)
	t.Logf("FIGURE semaphore: a SIGKILLed holder's permit (TTL %v) back after %v", ttl, took)
	if took > ttl+idle+100*time.Millisecond {
		t.Fatalf("permit back after %v, want within the TTL %v and one poll %v", took, ttl, idle)
	}
	mustNil(t, le.Release(bg(t)))
}

// A SIGSTOPped holder, resumed after its permit expired and another holder
// wrote with a newer token, sees Lost before its next fenced write, and
// that write is rejected; no write of the stale holder is accepted.
func TestSemaphoreStoppedHolder(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	const ttl = 300 * time.Millisecond
	proc, lines, old := startSemHolder(t, b.addr, pfx, ttl)
	if !lines.Scan() || lines.Text() != "tick" { // stopped in its sleep, not between its check and its write
		t.Fatalf("child: %q, want tick", lines.Text())
	}
	mustNil(t, proc.Signal(syscall.SIGSTOP))
	s := semaphore(t, newRegPrefix(t, b.pool(t), pfx, registry.WithFencing()), "sem", 1)
	le, err := s.Acquire(redistest.CtxFor(t, 5*time.Second), 0)
	mustNil(t, err)
	if le.Token() <= old {
		t.Fatalf("token %d after the stopped holder's %d", le.Token(), old)
	}
	c := b.pool(t).Get()
	ok, err := redis.Int(fencedWrite.Do(c, pfx+":store", le.Token()))
	c.Close()
	if err != nil || ok != 1 {
		t.Fatalf("the new holder's write: %v %v", ok, err)
	}
	mustNil(t, proc.Signal(syscall.SIGCONT))
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	if strings.Join(got, ",") != "lost,rejected" {
		t.Fatalf("the resumed holder said %q, want lost then rejected", got)
	}
	mustNil(t, le.Release(bg(t)))
}
