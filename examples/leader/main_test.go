package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// Replica processes are this test binary re-executed with these variables.
const (
	childAddr = "LOCKYARD_LEADER_ADDR"
	childName = "LOCKYARD_LEADER_NAME"
)

const (
	ttl  = time.Second
	poll = 100 * time.Millisecond // the registry's default idleBetweenTries
	// slack covers process scheduling on a shared, noisy machine.
	slack = 300 * time.Millisecond
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(childAddr); addr != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		err := replica(ctx, os.Stdout, addr, os.Getenv(childName), ttl, 20*time.Millisecond, 0)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := demo(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	var last int64
	terms := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		ev := parse(0, line)
		if ev.kind == "write" && ev.result != "accepted" {
			t.Fatalf("a leader's write was rejected:\n%s", out.String())
		}
		if ev.kind == "lead" {
			if ev.token <= last {
				t.Fatalf("token %d after %d:\n%s", ev.token, last, out.String())
			}
			last, terms = ev.token, terms+1
		}
	}
	if terms != 3 {
		t.Fatalf("%d terms, want 3:\n%s", terms, out.String())
	}
}

// event is one line of a replica's output.
type event struct {
	proc   int
	kind   string // lead, write, lost, resign
	token  int64
	result string // of a write: accepted or rejected
	at     time.Time
}

func parse(proc int, line string) event {
	ev := event{proc: proc, at: time.Now()}
	var name string
	fmt.Sscanf(line, "%s %s %d %s", &name, &ev.kind, &ev.token, &ev.result)
	return ev
}

// replicas starts n replica processes on addr; their events arrive on the
// returned channel.
func replicas(t *testing.T, addr string, n int) ([]*exec.Cmd, <-chan event) {
	events := make(chan event, 10000)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childAddr+"="+addr, fmt.Sprintf("%s=p%d", childName, i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		redistest.MustNil(t, err)
		redistest.MustNil(t, cmd.Start())
		cmds[i] = cmd
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				events <- parse(i, sc.Text())
			}
		}()
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	return cmds, events
}

// Three replica processes on a real redis-server. SIGKILL of the leader:
// another takes over within the TTL plus one poll. SIGSTOP of the next
// leader past its TTL: a third takes over; the resumed old leader reports
// the loss before any further write, and none of its writes is accepted
// after the new leader's.
func TestFailover(t *testing.T) {
	srv, err := redistest.Start()
	redistest.MustNil(t, err)
	defer srv.Close()
	cmds, events := replicas(t, srv.Addr, 3)

	first := redistest.Next(t, events, 10*time.Second, "a leader", func(ev event) bool { return ev.kind == "lead" })
	redistest.Next(t, events, 5*time.Second, "the leader's write", func(ev event) bool {
		return ev.proc == first.proc && ev.kind == "write" && ev.result == "accepted"
	})
	killed := time.Now()
	redistest.MustNil(t, cmds[first.proc].Process.Kill())
	second := redistest.Next(t, events, 5*time.Second, "a new leader after SIGKILL", func(ev event) bool {
		return ev.kind == "lead" && ev.proc != first.proc
	})
	takeover := second.at.Sub(killed)
	t.Logf("takeover after SIGKILL of the leader: %v (ttl %v, poll %v)", takeover, ttl, poll)
	if takeover > ttl+poll+slack {
		t.Errorf("takeover took %v, want at most ttl+poll (%v) plus %v", takeover, ttl+poll, slack)
	}
	if second.token <= first.token {
		t.Errorf("the new leader's token %d is not above %d", second.token, first.token)
	}

	// Stop the leader right after one of its writes: it is then between
	// two writes (20ms apart), not in the middle of one.
	redistest.Next(t, events, 5*time.Second, "the second leader's write", func(ev event) bool {
		return ev.proc == second.proc && ev.kind == "write"
	})
	stopped := cmds[second.proc].Process
	redistest.MustNil(t, stopped.Signal(syscall.SIGSTOP))
	third := redistest.Next(t, events, 5*time.Second, "a new leader after SIGSTOP", func(ev event) bool {
		return ev.kind == "lead" && ev.proc != second.proc
	})
	redistest.Next(t, events, 5*time.Second, "the third leader's write", func(ev event) bool {
		return ev.proc == third.proc && ev.kind == "write" && ev.result == "accepted"
	})
	resumed := time.Now()
	redistest.MustNil(t, stopped.Signal(syscall.SIGCONT))
	// The resumed leader's first event is the loss: it checks Lost before
	// each write, and Lost counts a deadline that passed during the stop.
	ev := redistest.Next(t, events, 5*time.Second, "the resumed leader's first event", func(ev event) bool {
		return ev.proc == second.proc && !ev.at.Before(resumed)
	})
	if ev.kind != "lost" {
		t.Fatalf("the resumed old leader's first event is %q (token %d, %s), want lost", ev.kind, ev.token, ev.result)
	}
	// Its late write, had it made one, is rejected by the token: the
	// storage has seen the third leader's.
	if ok := lateWrite(t, srv, second.token); ok {
		t.Fatalf("a write with the old leader's token %d was accepted after the new leader's", second.token)
	}
	for _, i := range []int{second.proc, third.proc} {
		redistest.MustNil(t, cmds[i].Process.Signal(syscall.SIGTERM))
		if err := cmds[i].Wait(); err != nil {
			t.Errorf("replica p%d after SIGTERM: %v", i, err)
		}
	}
}

// lateWrite makes the fenced write that a resumed old leader with token
// would make, and reports whether the storage accepted it.
func lateWrite(t *testing.T, srv *redistest.Server, token int64) bool {
	pool := srv.Pool()
	defer pool.Close()
	var out bytes.Buffer
	redistest.MustNil(t, write(context.Background(), &out, pool, "late", token))
	return strings.Contains(out.String(), "accepted")
}
