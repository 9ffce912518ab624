package gocronlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	gocronlock "github.com/lockyard/lockyard/gocron"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Scheduler processes are this test binary re-executed with these
// variables.
const (
	childRole  = "LOCKYARD_GOCRON_ROLE" // locker or elector
	childAddr  = "LOCKYARD_GOCRON_ADDR"
	childIndex = "LOCKYARD_GOCRON_INDEX"
)

const (
	electorTTL = time.Second
	poll       = 100 * time.Millisecond // the registry's default idleBetweenTries
	slack      = 300 * time.Millisecond // process scheduling on a noisy machine
	runsKey    = "gocron-test:runs"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childRole); role != "" {
		os.Exit(child(role))
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// child runs a scheduler until SIGTERM. Each job run appends
// "job second index" to runsKey.
func child(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	index, _ := strconv.Atoi(os.Getenv(childIndex))
	pool := redistest.NewPool(os.Getenv(childAddr))
	defer pool.Close()
	reg, err := registry.New(pool, "gocron-test", registry.WithAutoRenew(), registry.WithLockType(registry.PubSubLock))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer reg.Close()
	var opt gocron.SchedulerOption
	var el *gocronlock.Elector
	switch role {
	case "locker":
		// Replica i's ticks come i*5ms late: a splay longer than the
		// fast job, as between machines.
		opt = gocron.WithDistributedLocker(splay{gocronlock.NewLocker(reg), time.Duration(index) * 5 * time.Millisecond})
	case "elector":
		// The elector lives until the scheduler has shut down (Close).
		el = gocronlock.NewElector(context.Background(), reg, "scheduler", gocronlock.WithTTL(electorTTL))
		opt = gocron.WithDistributedElector(el)
		go reportLeader(ctx, el)
	}
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, job := range []struct {
		name string
		work time.Duration
	}{{"fast", time.Millisecond}, {"slow", 300 * time.Millisecond}} {
		_, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() {
			record(pool, fmt.Sprintf("%s %d %d", job.name, time.Now().Unix(), index))
			time.Sleep(job.work) // the job's work
		}), gocron.WithName(job.name))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	s.Start()
	fmt.Println("started")
	<-ctx.Done()
	if err := s.Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if el != nil {
		if err := el.Close(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0
}

// splay delays each Lock, as a replica whose tick comes later would.
type splay struct {
	gocron.Locker
	delay time.Duration
}

func (s splay) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	time.Sleep(s.delay)
	return s.Locker.Lock(ctx, key)
}

func record(pool *redis.Pool, run string) {
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("RPUSH", runsKey, run); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
	}
}

// reportLeader prints "leader" each time this replica becomes the leader.
func reportLeader(ctx context.Context, el gocron.Elector) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	leading := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := el.IsLeader(ctx) == nil
		if now && !leading {
			fmt.Println("leader")
		}
		leading = now
	}
}

// event is a line of a child's output.
type event struct {
	proc int
	line string
	at   time.Time
}

// schedulers starts n children with role on addr and waits until each has
// started its scheduler.
func schedulers(t *testing.T, role, addr string, n int) ([]*exec.Cmd, <-chan event) {
	events := make(chan event, 1000)
	started := make(chan int, n)
	cmds := make([]*exec.Cmd, n)
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childRole+"="+role, childAddr+"="+addr, fmt.Sprintf("%s=%d", childIndex, i))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		redistest.MustNil(t, err)
		redistest.MustNil(t, cmd.Start())
		cmds[i] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "started" {
					started <- i
					continue
				}
				events <- event{i, sc.Text(), time.Now()}
			}
		}()
	}
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-started:
		case <-timeout:
			t.Fatal("the schedulers did not start within 10s")
		}
	}
	return cmds, events
}

// run is one recorded job run.
type run struct {
	job    string
	second int64
	proc   int
}

func runs(t *testing.T, srv *redistest.Server) []run {
	v, err := redis.Strings(srv.Do("LRANGE", runsKey, 0, -1))
	redistest.MustNil(t, err)
	out := make([]run, 0, len(v))
	for _, s := range v {
		var r run
		fmt.Sscanf(s, "%s %d %d", &r.job, &r.second, &r.proc)
		out = append(out, r)
	}
	return out
}

// perSecond counts the runs of job by second, and returns the seconds in
// order.
func perSecond(rs []run, job string) (map[int64][]int, []int64) {
	by := map[int64][]int{}
	for _, r := range rs {
		if r.job == job {
			by[r.second] = append(by[r.second], r.proc)
		}
	}
	secs := make([]int64, 0, len(by))
	for s := range by {
		secs = append(secs, s)
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
	return by, secs
}

// stop ends the children in order with SIGTERM and checks their exit.
func stop(t *testing.T, cmds []*exec.Cmd, order ...int) {
	for _, i := range order {
		cmd := cmds[i]
		redistest.MustNil(t, cmd.Process.Signal(syscall.SIGTERM))
		if err := cmd.Wait(); err != nil {
			t.Errorf("scheduler %d after SIGTERM: %v", i, err)
		}
	}
}

// Three schedulers whose ticks come 0, 5 and 10ms apart run a cron job
// every second through the Locker: each tick runs exactly once across the
// processes, with a job of 1ms (shorter than the splay) and one of 300ms,
// and no tick is skipped.
func TestLockerRunsOncePerTick(t *testing.T) {
	srv := startServer(t)
	cmds, _ := schedulers(t, "locker", srv.Addr, 3)
	redistest.WaitFor(t, 15*time.Second, "7 ticks of each job", func() bool {
		for _, job := range []string{"fast", "slow"} {
			if _, secs := perSecond(runs(t, srv), job); len(secs) < 7 {
				return false
			}
		}
		return true
	})
	stop(t, cmds, 0, 1, 2)
	rs := runs(t, srv)
	for _, job := range []string{"fast", "slow"} {
		by, secs := perSecond(rs, job)
		for i, s := range secs {
			if len(by[s]) != 1 {
				t.Errorf("%s ran %d times at second %d (processes %v)", job, len(by[s]), s, by[s])
			}
			if i > 0 && s != secs[i-1]+1 {
				t.Errorf("%s skipped the ticks between seconds %d and %d", job, secs[i-1], s)
			}
		}
		t.Logf("%s: %d ticks", job, len(secs))
	}
}

// With the Elector only the leader runs jobs; after SIGKILL of the leader
// another scheduler leads within the TTL plus one poll, and runs them.
func TestElectorFailover(t *testing.T) {
	srv := startServer(t)
	cmds, events := schedulers(t, "elector", srv.Addr, 3)
	first := redistest.Next(t, events, 10*time.Second, "a leader", func(ev event) bool { return ev.line == "leader" })
	redistest.WaitFor(t, 10*time.Second, "3 ticks on the leader", func() bool {
		_, secs := perSecond(runs(t, srv), "fast")
		return len(secs) >= 3
	})
	killed := time.Now()
	redistest.MustNil(t, cmds[first.proc].Process.Kill())
	second := redistest.Next(t, events, 5*time.Second, "a new leader", func(ev event) bool {
		return ev.line == "leader" && ev.proc != first.proc
	})
	takeover := second.at.Sub(killed)
	t.Logf("takeover after SIGKILL of the leader: %v (ttl %v, poll %v)", takeover, electorTTL, poll)
	if takeover > electorTTL+poll+slack {
		t.Errorf("takeover took %v, want at most ttl+poll (%v) plus %v", takeover, electorTTL+poll, slack)
	}
	before := len(runs(t, srv))
	redistest.WaitFor(t, 10*time.Second, "3 ticks on the new leader", func() bool {
		return len(runs(t, srv)) >= before+6
	})
	// The follower first: a leader that shuts down resigns, and a
	// follower still running would lead and run a job meanwhile.
	stop(t, cmds, 3-first.proc-second.proc, second.proc)
	for _, job := range []string{"fast", "slow"} {
		by, secs := perSecond(runs(t, srv), job)
		for _, s := range secs {
			procs := by[s]
			switch {
			case len(procs) != 1:
				t.Errorf("%s ran %d times at second %d (processes %v)", job, len(procs), s, procs)
			case procs[0] != first.proc && procs[0] != second.proc:
				t.Errorf("%s ran at second %d on process %d, which never led", job, s, procs[0])
			}
		}
		t.Logf("%s: %d ticks", job, len(secs))
	}
	var seen []string
	for _, r := range runs(t, srv) {
		seen = append(seen, fmt.Sprint(r.proc))
	}
	if s := strings.Join(seen, ""); strings.Contains(s, fmt.Sprint(second.proc)) && strings.LastIndex(s, fmt.Sprint(first.proc)) > strings.Index(s, fmt.Sprint(second.proc)) {
		t.Errorf("runs by process (in order) %s: the old leader ran after the new one", s)
	}
}

// startServer starts a redis-server of the test's own, stopped at its end.
func startServer(t *testing.T) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start()
	redistest.MustNil(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// electorOn returns an elector of key on a registry of its own on the
// server at addr, made with opts, closed at the end of the test.
func electorOn(t *testing.T, addr, key string, ttl time.Duration, opts ...registry.Option) *gocronlock.Elector {
	t.Helper()
	pool := redistest.NewPool(addr)
	t.Cleanup(func() { pool.Close() })
	reg, err := registry.New(pool, "gocron-test", append([]registry.Option{registry.WithLockType(registry.PubSubLock)}, opts...)...)
	redistest.MustNil(t, err)
	t.Cleanup(func() { reg.Close() })
	el := gocronlock.NewElector(context.Background(), reg, key, gocronlock.WithTTL(ttl))
	t.Cleanup(func() { _ = el.Close(context.Background()) })
	return el
}

// Close resigns and returns once the leader key is released: a second
// elector leads at once, not a TTL (here 10s) later.
func TestElectorCloseHandsOver(t *testing.T) {
	srv := startServer(t)
	a := electorOn(t, srv.Addr, "close", 10*time.Second)
	redistest.WaitFor(t, 5*time.Second, "the first elector to lead", func() bool { return a.IsLeader(context.Background()) == nil })
	held, err := redis.String(srv.Do("GET", "gocron-test:close"))
	redistest.MustNil(t, err)
	b := electorOn(t, srv.Addr, "close", 10*time.Second)
	closed := time.Now()
	redistest.MustNil(t, a.Close(redistest.CtxFor(t, 5*time.Second)))
	// The key may already be b's (b's waiter takes it as soon as a releases,
	// before b says it leads): only a's token left there is a failure.
	if now, _ := redis.String(srv.Do("GET", "gocron-test:close")); now == held {
		t.Fatalf("Close returned with the leader key still held by the closed elector (%q)", held)
	}
	redistest.WaitFor(t, 5*time.Second, "the second elector to lead", func() bool { return b.IsLeader(context.Background()) == nil })
	if d := time.Since(closed); d > 500*time.Millisecond {
		t.Fatalf("the second elector led %v after the first one's Close, want at once", d)
	}
	if a.IsLeader(context.Background()) == nil {
		t.Fatal("the closed elector still says it leads")
	}
	redistest.MustNil(t, a.Close(context.Background())) // again: nothing to do
}

// Leader names the leading replica, from the leader and from a
// follower, by its label; no one once the leader closed.
func TestElectorLeader(t *testing.T) {
	srv := startServer(t)
	a := electorOn(t, srv.Addr, "named", 10*time.Second, registry.WithLabel("replica-a"))
	redistest.WaitFor(t, 5*time.Second, "the first elector to lead", func() bool { return a.IsLeader(context.Background()) == nil })
	b := electorOn(t, srv.Addr, "named", 10*time.Second, registry.WithLabel("replica-b"))
	for _, e := range []*gocronlock.Elector{a, b} {
		h, ok, err := e.Leader(context.Background())
		if !ok || err != nil || h.Label != "replica-a" || h.TTL <= 0 {
			t.Fatalf("Leader = %+v, %v, %v; want replica-a", h, ok, err)
		}
	}
	redistest.MustNil(t, a.Close(redistest.CtxFor(t, 5*time.Second)))
	redistest.WaitFor(t, 5*time.Second, "the second elector to lead", func() bool { return b.IsLeader(context.Background()) == nil })
	if h, ok, err := a.Leader(context.Background()); !ok || err != nil || h.Label != "replica-b" {
		t.Fatalf("after the first one closed: Leader = %+v, %v, %v; want replica-b", h, ok, err)
	}
	bad := gocronlock.NewElector(context.Background(), nil, "named")
	if _, _, err := bad.Leader(context.Background()); !errors.Is(err, registry.ErrInvalidConfig) {
		t.Fatalf("Leader of a misconfigured elector: %v, want ErrInvalidConfig", err)
	}
}

// The Elector renews its lease itself: on a registry without WithAutoRenew
// it leads without a break for many TTLs.
func TestElectorWithoutAutoRenew(t *testing.T) {
	srv := startServer(t)
	el := electorOn(t, srv.Addr, "renew", 600*time.Millisecond)
	redistest.WaitFor(t, 5*time.Second, "the elector to lead", func() bool { return el.IsLeader(context.Background()) == nil })
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); { // five TTLs
		if err := el.IsLeader(context.Background()); err != nil {
			t.Fatalf("the elector stopped leading: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // sampling, not waiting for a condition
	}
}

// Closing the registry under a leading Elector ends its campaign: it
// resigns (the key is released) and leads no more, on a registry without
// WithAutoRenew too, where nothing else stops its renewals. Its Close then
// returns nil whatever the ctx, every time.
func TestElectorStopsWithRegistry(t *testing.T) {
	srv := startServer(t)
	for _, autoRenew := range []bool{false, true} {
		pool := redistest.NewPool(srv.Addr)
		opts := []registry.Option{}
		if autoRenew {
			opts = append(opts, registry.WithAutoRenew())
		}
		reg, err := registry.New(pool, "gocron-test", opts...)
		redistest.MustNil(t, err)
		key := fmt.Sprint("closed-registry-", autoRenew)
		el := gocronlock.NewElector(context.Background(), reg, key, gocronlock.WithTTL(time.Minute))
		redistest.WaitFor(t, 5*time.Second, "the elector to lead", func() bool { return el.IsLeader(context.Background()) == nil })
		redistest.MustNil(t, reg.Close())
		redistest.WaitFor(t, 5*time.Second, "the leader key to be released", func() bool {
			n, _ := redis.Int(srv.Do("EXISTS", "gocron-test:"+key))
			return n == 0
		})
		if el.IsLeader(context.Background()) == nil {
			t.Fatalf("autoRenew=%v: the elector of a closed registry still leads", autoRenew)
		}
		done, cancel := context.WithCancel(context.Background())
		cancel()
		redistest.MustNil(t, el.Close(redistest.CtxFor(t, 5*time.Second)))
		for i := 0; i < 50; i++ {
			if err := el.Close(done); err != nil {
				t.Fatalf("Close(a done ctx) after the campaign ended: %v, want nil", err)
			}
		}
		pool.Close()
	}
}
