package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"golang.org/x/sys/unix"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// childEnv names the role of a re-executed test binary (see child_test.go).
const childEnv = "LOCKYARD_CHAOS_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// mono is CLOCK_MONOTONIC in nanoseconds: one clock for every process of
// the machine, so intervals logged by different processes compare.
func mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// figure logs a scenario's measured figure; make chaos collects the lines.
func figure(t *testing.T, scenario int, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("FIGURE %d: %s", scenario, fmt.Sprintf(format, args...))
	t.Log(line)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, t.Name()+"\t"+line)
			f.Close()
		}
	}
}

// startServer starts a redis-server on a free loopback port for the test.
// A missing redis-server fails the test: make chaos installs it.
func startServer(t testing.TB, extra ...string) *redistest.Server {
	t.Helper()
	s, err := redistest.Start(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Signal(unix.SIGCONT) // a test that failed mid-stall
		s.Close()
	})
	return s
}

// newPool returns a pool for addr without read or write timeouts (the
// registry bounds each command itself) and a bounded size.
func newPool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle:   32,
		MaxActive: 256,
		Wait:      true,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(time.Second))
		},
	}
}

// newRegistry returns a registry on pool that logs into the test log, and
// closes both when the test ends.
func newRegistry(t testing.TB, pool *redis.Pool, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithLogger(testLogger(t))}, opts...)
	r, err := registry.New(pool, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); pool.Close() })
	return r
}

// testLogger writes warnings and errors into the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// do runs one command on a fresh connection to addr.
func do(t testing.TB, addr, cmd string, args ...any) any {
	t.Helper()
	v, err := redistest.Do(addr, cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

// repeat runs body in a goroutine, again and again until stop is closed.
func repeat(wg *sync.WaitGroup, stop <-chan struct{}, body func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			body()
		}
	}()
}

// waitFor is redistest.WaitFor: a deadline poll.
var waitFor = redistest.WaitFor

// mustNil, mustIs and ctxFor are the shared test helpers of redistest.
var (
	mustNil = redistest.MustNil
	mustIs  = redistest.MustIs
	ctxFor  = redistest.CtxFor
)

// acquired is the outcome of a lockAsync.
type acquired struct {
	at  int64 // mono() when LockContext returned
	err error // LockContext's error, or else UnlockContext's
}

// lockAsync runs LockContext in a goroutine (locks belong to goroutines, so
// that goroutine also unlocks, after hold) and delivers the outcome.
func lockAsync(ctx context.Context, l *registry.RedisLock, hold time.Duration) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		err := l.LockContext(ctx)
		a := acquired{at: mono(), err: err}
		if err == nil {
			time.Sleep(hold) // the critical section
			a.err = l.UnlockContext(context.Background())
		}
		ch <- a
	}()
	return ch
}

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

// median of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// interval is one critical section as a holder logged it.
type interval struct {
	Key      string `json:"k"`
	Proc     string `json:"p"`
	Token    int64  `json:"t"`
	Acquired int64  `json:"a"`           // mono() after Lock returned
	Released int64  `json:"r"`           // mono() before Unlock was called
	Lease    bool   `json:"l,omitempty"` // a lease, released by another goroutine
}

// overlaps returns the pairs of intervals on one key that overlap.
func overlaps(ivs []interval) [][2]interval {
	byKey := map[string][]interval{}
	for _, iv := range ivs {
		byKey[iv.Key] = append(byKey[iv.Key], iv)
	}
	var bad [][2]interval
	for _, list := range byKey {
		sort.Slice(list, func(i, j int) bool { return list[i].Acquired < list[j].Acquired })
		last := 0 // index of the interval that ends latest so far
		for i := 1; i < len(list); i++ {
			if list[i].Acquired < list[last].Released {
				bad = append(bad, [2]interval{list[last], list[i]})
			}
			if list[i].Released > list[last].Released {
				last = i
			}
		}
	}
	return bad
}

// fenceSrc is the fenced resource: a write carrying a fencing token is
// accepted only if the token is greater than every token seen for the key,
// and counts the writers inside (occupancy); it records the peak occupancy
// and the rejections. KEYS: last token, occupancy, peak, rejected.
const fenceSrc = `
local tok = tonumber(ARGV[1])
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tok <= last then
  redis.call('INCR', KEYS[4])
  return {0, 0}
end
redis.call('SET', KEYS[1], tok)
local occ = redis.call('INCR', KEYS[2])
if occ > tonumber(redis.call('GET', KEYS[3]) or '0') then redis.call('SET', KEYS[3], occ) end
return {1, occ}`

var fenceScript = redis.NewScript(4, fenceSrc)

// resource is the fenced resource on its own redis-server.
type resource struct{ addr string }

func fenceKeys(key string) []any {
	return []any{"last:" + key, "occ:" + key, "peak:" + key, "rejected:" + key}
}

// enter writes with token; it reports whether the write was accepted.
func (res resource) enter(c redis.Conn, key string, token int64) (bool, error) {
	v, err := redis.Int64s(fenceScript.Do(c, append(fenceKeys(key), token)...))
	if err != nil {
		return false, err
	}
	return v[0] == 1, nil
}

// leave ends an accepted write.
func (res resource) leave(c redis.Conn, key string) error {
	_, err := c.Do("DECR", "occ:"+key)
	return err
}

// stats returns the peak occupancy and the rejected writes of key.
func (res resource) stats(t testing.TB, key string) (peak, rejected int) {
	peak, _ = redis.Int(do(t, res.addr, "GET", "peak:"+key), nil)
	rejected, _ = redis.Int(do(t, res.addr, "GET", "rejected:"+key), nil)
	return peak, rejected
}

// child is a re-executed test binary running one role.
type child struct {
	cmd    *exec.Cmd
	events chan map[string]any // JSON lines from its stdout
	done   chan error
}

// spawn starts the test binary as a child in role with args (JSON).
func spawn(t *testing.T, role string, args any) *child {
	t.Helper()
	js, err := json.Marshal(args)
	mustNil(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, "LOCKYARD_CHAOS_ARGS="+string(js))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	mustNil(t, err)
	mustNil(t, cmd.Start())
	c := &child{cmd: cmd, events: make(chan map[string]any, 64), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				c.events <- ev
			}
		}
		close(c.events)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(unix.SIGCONT)
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

// event waits up to d for the child's next event, which must be named name.
func (c *child) event(t *testing.T, d time.Duration, name string) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			t.Fatalf("child exited before %q", name)
		}
		if ev["event"] != name {
			t.Fatalf("child event %v, want %q", ev, name)
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no %q from the child within %v", name, d)
	}
	return nil
}

// wait waits up to d for the child to exit, dropping its further events,
// and returns its error.
func (c *child) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				err := <-c.done
				c.done <- err // for the cleanup
				return err
			}
		case <-timer.C:
			t.Fatalf("child still running after %v", d)
		}
	}
}

// every returns a fault that sends cmd to the server at addr every 150 ms
// until stop closes, counting in n the rounds it took. A CLIENT command
// (CLIENT KILL TYPE normal) kills the pub/sub connections too.
func every(addr string, n *atomic.Int64, cmd ...any) func(stop <-chan struct{}) {
	return func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
				if _, err := redistest.Do(addr, cmd[0].(string), cmd[1:]...); err == nil {
					n.Add(1)
				}
				if cmd[0] == "CLIENT" {
					_, _ = redistest.Do(addr, "CLIENT", "KILL", "TYPE", "pubsub")
				}
			}
		}
	}
}

// faultCases are the faults that scenarios 19 and 20 run under: none, and
// CLIENT KILL and SCRIPT FLUSH every 150 ms.
var faultCases = []struct {
	name string
	cmd  []any
}{{"no fault", nil}, {"client kill", []any{"CLIENT", "KILL", "TYPE", "normal"}}, {"script flush", []any{"SCRIPT", "FLUSH"}}}

// faultRun is one run of underFaults: the servers (Redis, and the
// resource's), the key prefix, the fault to run, and its name.
type faultRun struct {
	srv, res *redistest.Server
	prefix   string
	name     string
	faulty   bool // a fault runs (not "no fault")
	fault    func(stop <-chan struct{})
	rounds   *atomic.Int64 // the fault's rounds that took
}

// underFaults runs body once per fault of faultCases (a subtest each), on
// servers of its own, with the key prefix scenario and a letter. A fault
// that never took fails the run.
func underFaults(t *testing.T, scenario string, body func(t *testing.T, r faultRun)) {
	for i, tc := range faultCases {
		t.Run(tc.name, func(t *testing.T) {
			r := faultRun{srv: startServer(t), res: startServer(t), prefix: scenario + string(rune('a'+i)),
				name: tc.name, faulty: tc.cmd != nil, fault: func(<-chan struct{}) {}, rounds: new(atomic.Int64)}
			if tc.cmd != nil {
				r.fault = every(r.srv.Addr, r.rounds, tc.cmd...)
			}
			body(t, r)
			if tc.cmd != nil && r.rounds.Load() == 0 {
				t.Fatalf("%s: no fault took", tc.name)
			}
		})
	}
}

// runChildren runs three children in role with a for a.Deadline while
// fault runs, and returns the sums of fields in their "done" events.
func runChildren(t *testing.T, role string, a semArgs, fault func(stop <-chan struct{}), fields ...string) map[string]int64 {
	t.Helper()
	var kids []*child
	for range 3 {
		kids = append(kids, spawn(t, role, a))
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); fault(stop) }()
	sum := map[string]int64{}
	for _, k := range kids {
		ev := k.event(t, a.Deadline+30*time.Second, "done")
		for _, f := range fields {
			sum[f] += int64(ev[f].(float64))
		}
		mustNil(t, k.wait(t, 10*time.Second))
	}
	close(stop)
	<-done
	return sum
}

// freeAfter returns how long take took, given ttl + 2 s, on a fenced
// registry of prefix at addr that polls every 20 ms, and releases what it
// took: the faults left nothing held longer than its TTL.
func freeAfter(t *testing.T, addr, prefix string, ttl time.Duration, take func(ctx context.Context, r *registry.Registry) (*registry.Lease, error)) time.Duration {
	t.Helper()
	r := newRegistry(t, newPool(addr), prefix, registry.WithFencing(), registry.WithIdleBetweenTries(20*time.Millisecond))
	start := time.Now()
	le, err := take(ctxFor(t, ttl+2*time.Second), r)
	mustNil(t, err)
	took := time.Since(start)
	mustNil(t, le.Release(ctxFor(t, time.Second)))
	return took
}

// countRelease releases le and counts a loss in lost, another error in
// errs.
func countRelease(le *registry.Lease, lost, errs *atomic.Int64) {
	switch err := le.Release(context.Background()); {
	case errors.Is(err, registry.ErrLockLost):
		lost.Add(1)
	case err != nil:
		errs.Add(1)
	}
}

var stdoutMu sync.Mutex

// emit writes one JSON event line to stdout (child side).
func emit(ev map[string]any) {
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	js, _ := json.Marshal(ev)
	os.Stdout.Write(append(js, '\n'))
}

// logCounter is a slog handler that counts the records whose message
// contains a substring.
type logCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

func (h *logCounter) count(sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}
