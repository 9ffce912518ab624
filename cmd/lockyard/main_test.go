package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

const mainEnv = "LOCKYARD_CMD_MAIN"

var server *redistest.Server

// TestMain runs the command itself when re-executed by a test, and
// otherwise starts the real redis-server the tests use.
func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(realMain(os.Args[1:]))
	}
	var err error
	if server, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: real-Redis tier:", err) // never skipped
		os.Exit(1)
	}
	code := m.Run()
	server.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// lockyard returns the command `lockyard args...` against the test server.
func lockyard(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// GORACE: a -race binary sleeps a second at exit by default (to let
	// goroutines report races); lockyard run waits for its reaper's exit.
	cmd.Env = append(os.Environ(), mainEnv+"=1", "REDIS_URL=redis://"+server.Addr, "GORACE=atexit_sleep_ms=0")
	return cmd
}

// exitCode runs cmd and returns its exit status and its output.
func exitCode(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("%v: %v", cmd.Args, err)
	return 0, ""
}

var keySeq int

// newKey returns a lock key unique to the test.
func newKey(t *testing.T) string {
	keySeq++
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), keySeq)
}

func exists(t *testing.T, key string) bool {
	n, err := redis.Int(server.Do("EXISTS", "lockyard:"+key))
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// holdElsewhere holds key in a library registry, as another process
// would, until the test ends or release is called.
func holdElsewhere(t *testing.T, key string) (release func()) {
	t.Helper()
	pool := server.Pool()
	t.Cleanup(func() { _ = pool.Close() })
	reg, err := registry.New(pool, "lockyard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	l, _ := reg.Obtain(key)
	if err := l.LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(l.Unlock) }
	t.Cleanup(release)
	return release
}

// waitFor is redistest.WaitFor: a deadline poll.
var waitFor = redistest.WaitFor

// runLogged starts n `lockyard run ARGS -- sh -c ...` at once, each
// command logging start, sleeping secs and logging end, waits for them all,
// and returns the log's words in order.
func runLogged(t *testing.T, n int, secs float64, args ...string) []string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	script := fmt.Sprintf(`echo start >> %[1]s; sleep %[2]g; echo end >> %[1]s`, log, secs)
	var cmds []*exec.Cmd
	for range n {
		c := lockyard(append(append([]string{"run"}, args...), "--", "sh", "-c", script)...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("lockyard run: %v", err)
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// Three `lockyard run` processes on one key: their commands never overlap.
func TestRunExclusion(t *testing.T) {
	key := newKey(t)
	got := runLogged(t, 3, 0.2, "--wait", "20s", "--pubsub", key)
	if strings.Join(got, " ") != "start end start end start end" {
		t.Fatalf("the commands overlapped: %v", got)
	}
	if exists(t, key) {
		t.Fatal("the lock is still held after the last run")
	}
}

func TestRunExitCodes(t *testing.T) {
	key := newKey(t)
	if code, _ := exitCode(t, lockyard("run", key, "--", "sh", "-c", "exit 3")); code != 3 {
		t.Errorf("command exit 3: lockyard exited %d", code)
	}
	if code, _ := exitCode(t, lockyard("run", key, "--", "sh", "-c", "kill -9 $$")); code != 128+9 {
		t.Errorf("command killed by SIGKILL: lockyard exited %d, want 137", code)
	}
	if code, out := exitCode(t, lockyard("run", key)); code != exitUsage {
		t.Errorf("no command: exit %d (%s), want %d", code, out, exitUsage)
	}
	for _, bad := range [][]string{{"--ttl", "1ms"}, {"--ttl", "0"}, {"--ttl", "49ms"}, {"--wait", "-1s"}} {
		args := append(append([]string{"run"}, bad...), key, "--", "true")
		code, out := exitCode(t, lockyard(args...))
		if code != exitUsage || !strings.Contains(out, bad[0]) {
			t.Errorf("run %v: exit %d (%s), want %d naming %s", bad, code, out, exitUsage, bad[0])
		}
	}
	cmd := lockyard("run", key, "--", "true")
	cmd.Env = append(cmd.Env, "REDIS_URL=redis://127.0.0.1:1")
	if code, out := exitCode(t, cmd); code != exitUnavailable {
		t.Errorf("no Redis: exit %d (%s), want %d", code, out, exitUnavailable)
	}

	// Held by a library registry: not acquired, at once or after --wait.
	holdElsewhere(t, key)
	for _, now := range [][]string{{"-n"}, {"--nonblock"}, {"--wait", "0"}} {
		args := append(append([]string{"run"}, now...), key, "--", "true")
		if code, _ := exitCode(t, lockyard(args...)); code != exitNotAcquired {
			t.Errorf("held elsewhere, %v: exit %d, want %d", now, code, exitNotAcquired)
		}
	}
	start := time.Now()
	if code, _ := exitCode(t, lockyard("run", "--wait", "300ms", key, "--", "true")); code != exitNotAcquired {
		t.Errorf("held elsewhere, --wait 300ms: exit %d, want %d", code, exitNotAcquired)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("--wait 300ms gave up after %v", d)
	}
}

// trapFiles are the files a trapCommand creates: ready once its traps are
// set, a line in ints per SIGINT, and term on SIGTERM.
type trapFiles struct{ ready, ints, term string }

// trapCommand returns the argv of `sh -c SCRIPT` for run: the script runs
// check, records SIGINTs, exits with exit on SIGTERM, and otherwise loops
// for at most a minute.
func trapCommand(t *testing.T, exit int, check string) ([]string, trapFiles) {
	dir := t.TempDir()
	f := trapFiles{filepath.Join(dir, "ready"), filepath.Join(dir, "ints"), filepath.Join(dir, "term")}
	script := fmt.Sprintf(`trap 'echo INT >> %q' INT; trap ': > %q; exit %d' TERM; : > %q; `+
		`n=0; while [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done`, f.ints, f.term, exit, f.ready)
	if check != "" {
		script = check + "; " + script
	}
	return []string{"sh", "-c", script}, f
}

// startTrapped starts `lockyard args... -- trapCommand`, and returns once
// the command's traps are set: a SIGTERM sent earlier would kill the shell
// by default action, which is not what the tests look at. setup, if not
// nil, adjusts the command before it starts.
func startTrapped(t *testing.T, exit int, check string, setup func(*exec.Cmd), args ...string) (*exec.Cmd, trapFiles) {
	t.Helper()
	argv, f := trapCommand(t, exit, check)
	cmd := lockyard(append(append(args, "--"), argv...)...)
	if setup != nil {
		setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // the test failed before its Wait
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	waitFor(t, 5*time.Second, "the command's traps", func() bool { return fileExists(f.ready) })
	return cmd, f
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// If lockyard dies by SIGKILL, nothing renews the lock: on Linux the
// command gets the --on-lost signal instead of running on unprotected.
func TestRunKilledSignalsCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	key := newKey(t)
	cmd, f := startTrapped(t, 7, "", nil, "run", key)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitFor(t, 5*time.Second, "SIGTERM to the command of the killed lockyard", func() bool { return fileExists(f.term) })
}

// SIGTERM to lockyard reaches the command, and the lock is released after
// it exits.
func TestRunForwardsSignals(t *testing.T) {
	key := newKey(t)
	cmd, _ := startTrapped(t, 7, "", nil, "run", key)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("lockyard run: %v, want exit 7 (the command's, after the forwarded SIGTERM)", err)
	}
	if exists(t, key) {
		t.Fatal("the lock was not released")
	}
}

// A signal while run waits for the lock ends the wait: run exits 128+N as
// a shell would, and the command never starts.
func TestRunSignalWhileWaiting(t *testing.T) {
	key, ran := newKey(t), filepath.Join(t.TempDir(), "ran")
	holdElsewhere(t, key)

	subs := func() int { // pattern subscriptions, and channels subscribed (by key: the registry's)
		n, err := redis.Int(server.Do("PUBSUB", "NUMPAT"))
		if err != nil {
			t.Fatal(err)
		}
		chs, err := redis.Strings(server.Do("PUBSUB", "CHANNELS"))
		if err != nil {
			t.Fatal(err)
		}
		return n + len(chs)
	}
	before := subs()
	cmd := lockyard("run", "--pubsub", "--wait", "1m", key, "--", "sh", "-c", ": > "+ran)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	// A PubSubLock subscribes after its first failed attempt: run waits.
	waitFor(t, 5*time.Second, "run to wait", func() bool { return subs() > before })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("SIGTERM while waiting: %v, want exit %d", err, 128+int(syscall.SIGTERM))
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran although run was interrupted before it got the lock")
	}
	if !exists(t, key) {
		t.Fatal("the holder's lock is gone")
	}
}

// An operator's release --force while a command runs: status shows the
// lock first, release says what it removed, and run signals its command
// and exits with the lost-lock status.
func TestStatusReleaseAndLoss(t *testing.T) {
	key := newKey(t)
	// A fence counter at 0 (a new one starts at the server's clock).
	if _, err := server.Do("SET", "{lockyard:"+key+"}:fence", 0); err != nil {
		t.Fatal(err)
	}
	cmd, _ := startTrapped(t, 9, `test "$LOCKYARD_TOKEN" = 1 || exit 2`, nil, "run", "--ttl", "600ms", "--fencing", key)
	if !exists(t, key) {
		t.Fatal("the command runs but the lock is not held")
	}
	code, out := exitCode(t, lockyard("status"))
	if code != 0 || !strings.Contains(out, key) || !strings.Contains(out, "held") {
		t.Fatalf("status (exit %d):\n%s", code, out)
	}
	code, out = exitCode(t, lockyard("status", key))
	if fields := strings.Fields(strings.Split(out, "\n")[1]); code != 0 || len(fields) != 6 || fields[3] != "1" {
		t.Fatalf("status %s (exit %d): want one held line with fence 1:\n%s", key, code, out)
	}
	if code, out := exitCode(t, lockyard("release", key)); code != exitUsage {
		t.Fatalf("release without --force: exit %d (%s)", code, out)
	}
	code, out = exitCode(t, lockyard("release", "--force", key))
	if code != 0 || !strings.HasPrefix(out, "removed lockyard:"+key) {
		t.Fatalf("release --force (exit %d): %s", code, out)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitLost {
		t.Fatalf("lockyard run after the forced release: %v, want exit %d", err, exitLost)
	}
	code, out = exitCode(t, lockyard("release", "--force", key))
	if code != 0 || !strings.Contains(out, "was not held") {
		t.Fatalf("second release --force (exit %d): %s", code, out)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("rediss://app:s3cret@redis.example:6380/2"); strings.Contains(got, "s3cret") {
		t.Fatalf("redactURL left the password: %s", got)
	}
}

// With --hash-tag, run, status and release use the registryKey:{KEY} form
// of WithHashTag registries, and status lists only lock keys, not fence
// counters.
func TestHashTagForm(t *testing.T) {
	key := newKey(t)
	// A fence counter at 0 (a new one starts at the server's clock).
	if _, err := server.Do("SET", "lockyard:{"+key+"}:fence", 0); err != nil {
		t.Fatal(err)
	}
	if code, out := exitCode(t, lockyard("run", "--hash-tag", "--fencing", key, "--", "sh", "-c",
		`test "$LOCKYARD_KEY" = "lockyard:{`+key+`}"`)); code != 0 {
		t.Fatalf("run --hash-tag: exit %d: %s", code, out)
	}
	cmd := lockyard("run", "--hash-tag", "--fencing", key, "--", "sh", "-c", `while :; do sleep 0.02; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(t, 5*time.Second, "the lock", func() bool {
		n, _ := redis.Int(server.Do("EXISTS", "lockyard:{"+key+"}"))
		return n == 1
	})
	code, out := exitCode(t, lockyard("status", "--hash-tag"))
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, key) {
			if line != "" {
				t.Fatalf("status lists %s twice (fence counter as a lock?):\n%s", key, out)
			}
			line = l
		}
	}
	if f := strings.Fields(line); code != 0 || len(f) != 6 || f[0] != key || f[1] != "held" || f[3] != "2" {
		t.Fatalf("status --hash-tag (exit %d): want %s held with fence 2:\n%s", code, key, out)
	}
	if code, out := exitCode(t, lockyard("release", "--force", "--hash-tag", key)); code != 0 || !strings.HasPrefix(out, "removed lockyard:{"+key+"}") {
		t.Fatalf("release --force --hash-tag (exit %d): %s", code, out)
	}
}

// SIGHUP (a dropped ssh session) and SIGQUIT are forwarded as SIGTERM is,
// and the lock is released once the command exits: they used to kill
// lockyard and leave the key for its TTL.
func TestRunForwardsHangupAndQuit(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		key := newKey(t)
		cmd, _ := startTrapped(t, 7, "", nil, "run", "--ttl", "1m", key)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
			t.Fatalf("%v to lockyard run: %v, want exit %d (the command, killed by the forwarded %v)", sig, err, 128+int(sig), sig)
		}
		if exists(t, key) {
			t.Fatalf("%v: the lock was not released", sig)
		}
	}
}

// --min-hold keeps the key from when it was taken, though the command ends
// at once; a lock on the key is then refused until it has passed.
func TestRunMinHold(t *testing.T) {
	key := newKey(t)
	start := time.Now()
	if code, out := exitCode(t, lockyard("run", "--min-hold", "2s", key, "--", "true")); code != 0 {
		t.Fatalf("run --min-hold: exit %d: %s", code, out)
	}
	if !exists(t, key) {
		t.Fatalf("the key is gone %v after the start: --min-hold 2s did not keep it", time.Since(start))
	}
	if code, _ := exitCode(t, lockyard("run", "-n", key, "--", "true")); code != exitNotAcquired {
		t.Fatalf("run -n during the minimum hold: exit %d, want %d", code, exitNotAcquired)
	}
	waitFor(t, 5*time.Second, "the key to expire", func() bool { return !exists(t, key) })
	if d := time.Since(start); d < 2*time.Second {
		t.Fatalf("the key lived %v, want at least the 2s minimum hold", d)
	}
}

// -w is --wait, and both take a number of seconds, as flock's -w does.
func TestRunWaitSeconds(t *testing.T) {
	key := newKey(t)
	holdElsewhere(t, key)
	for _, w := range [][]string{{"-w", "1"}, {"--wait", "0.5"}} {
		start := time.Now()
		args := append(append([]string{"run"}, w...), key, "--", "true")
		if code, out := exitCode(t, lockyard(args...)); code != exitNotAcquired {
			t.Fatalf("run %v on a held key: exit %d (%s), want %d", w, code, out, exitNotAcquired)
		}
		want, _ := time.ParseDuration(w[1] + "s")
		if d := time.Since(start); d < want || d > want+3*time.Second {
			t.Fatalf("run %v gave up after %v", w, d)
		}
	}
	if code, out := exitCode(t, lockyard("run", "-w", "soon", key, "--", "true")); code != exitUsage {
		t.Fatalf("-w soon: exit %d (%s), want %d", code, out, exitUsage)
	}
}

// `lockyard run --permits 2`: of four runs at most two commands run at
// once, and two do; a fifth with -n while two permits are held elsewhere
// exits 75; a negative count is a usage error.
func TestRunPermits(t *testing.T) {
	key := newKey(t)
	words := runLogged(t, 4, 0.3, "--permits", "2", "--wait", "20s", "--pubsub", "--fencing", key)
	most, now := 0, 0
	for _, w := range words {
		if w == "start" {
			now++
		} else {
			now--
		}
		most = max(most, now)
	}
	if most != 2 {
		t.Fatalf("at most %d commands ran at once, want 2: %v", most, words)
	}
	if exists(t, key) {
		t.Fatal("the semaphore still holds permits after the last run")
	}

	pool := server.Pool()
	t.Cleanup(func() { _ = pool.Close() })
	reg, err := registry.New(pool, "lockyard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	s, err := reg.Semaphore(key, 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		le, err := s.Acquire(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = le.Release(context.Background()) })
	}
	code, out := exitCode(t, lockyard("status", key))
	if code != 0 || strings.Count(out, " permit ") != 2 || !strings.Contains(out, "semaphore: 2/2 held, 0 waiting") {
		t.Fatalf("status of the semaphore (exit %d): want two permits of two held:\n%s", code, out)
	}
	if _, out := exitCode(t, lockyard("status", "--json", key)); !strings.Contains(out, `"permits":2`) {
		t.Fatalf("status --json of the semaphore: want its count of permits:\n%s", out)
	}
	if code, out := exitCode(t, lockyard("run", "--permits", "2", "-n", key, "--", "true")); code != 75 || !strings.Contains(out, "every permit") {
		t.Fatalf("-n with every permit held: exit %d, %q; want 75", code, out)
	}
	for _, n := range []string{"-1", "0"} {
		if code, _ := exitCode(t, lockyard("run", "--permits", n, key, "--", "true")); code != 64 {
			t.Fatalf("--permits %s: exit %d, want 64", n, code)
		}
	}
	// Another count beside the holders of two: told at once (65), whether
	// run waits or not.
	for _, wait := range []string{"-n", "--wait=20s"} {
		if code, out := exitCode(t, lockyard("run", "--permits", "3", wait, key, "--", "true")); code != 65 || !strings.Contains(out, "held with 2 permits, not 3") {
			t.Fatalf("run --permits 3 %s beside holders of 2: exit %d, %q; want 65 naming both counts", wait, code, out)
		}
	}
	// The semaphore's key taken as a lock: the other kind (65), at once,
	// whether run waits or not.
	for _, wait := range []string{"-n", "--wait=20s"} {
		if code, out := exitCode(t, lockyard("run", wait, key, "--", "true")); code != 65 || !strings.Contains(out, "is a semaphore, not a lock") {
			t.Fatalf("run %s on a semaphore's key: exit %d, %q; want 65 naming both kinds", wait, code, out)
		}
	}
}

// `lockyard release --force` frees a semaphore's permits left by a holder
// that died (a SIGKILLed `run --permits` whose TTL is an hour): --holder
// takes out that registry's permits alone, without it every permit goes;
// a run waiting for the permit gets it at its next try. On a lock key,
// --holder removes the lock only if that holder holds it.
func TestReleaseForcePermits(t *testing.T) {
	key := newKey(t)
	sk := "lockyard:" + key
	exp := time.Now().Add(time.Hour).UnixMilli() // the server's clock is this one
	for _, tok := range []string{"dead:0000000000000001", "alive:0000000000000002"} {
		if _, err := server.Do("ZADD", sk, exp, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := server.Do("PEXPIRE", sk, 3_600_000); err != nil {
		t.Fatal(err)
	}
	run := lockyard("run", "--permits", "2", "--wait", "20s", key, "--", "true")
	done := make(chan int, 1)
	go func() { code, _ := exitCode(t, run); done <- code }()
	waitFor(t, 10*time.Second, "the run in line", func() bool {
		n, _ := redis.Int(server.Do("EXISTS", wire.Layout{Registry: "lockyard"}.QueueKey(sk)))
		return n == 1
	})
	code, out := exitCode(t, lockyard("release", "--force", "--holder", "dead", key))
	if code != 0 || !strings.Contains(out, "took 1 permit(s)") || !strings.Contains(out, "1 left held") {
		t.Fatalf("release --force --holder dead: exit %d: %s", code, out)
	}
	if n, _ := redis.Int(server.Do("ZSCORE", sk, "alive:0000000000000002")); n == 0 {
		t.Fatal("the other holder's permit was taken out too")
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("the waiting run exited %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting run did not get the freed permit")
	}
	code, out = exitCode(t, lockyard("release", "--force", key))
	if code != 0 || !strings.Contains(out, "took 1 permit(s)") || exists(t, key) {
		t.Fatalf("release --force of the semaphore: exit %d: %s (key left: %v)", code, out, exists(t, key))
	}

	// A lock key: --holder removes it only if that holder holds it.
	if _, err := server.Do("SET", sk, "alive:0000000000000003", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if code, out := exitCode(t, lockyard("release", "--force", "--holder", "dead", key)); code != exitFree || !exists(t, key) {
		t.Fatalf("release --force --holder dead of alive's lock: exit %d: %s (key left: %v)", code, out, exists(t, key))
	}
	if code, out := exitCode(t, lockyard("release", "--force", "--holder", "alive", key)); code != 0 || exists(t, key) {
		t.Fatalf("release --force --holder alive of its lock: exit %d: %s (key left: %v)", code, out, exists(t, key))
	}
}

// `lockyard run -s` holds the read side of a read-write lock, as flock -s:
// three such runs overlap; `-x` runs alone; -s with -x or --permits is a
// usage error, and -x on a lock's key is the other kind (65).
func TestRunSharedExclusive(t *testing.T) {
	key := newKey(t)
	words := runLogged(t, 3, 0.4, "-s", "--wait", "20s", "--pubsub", key)
	if strings.Join(words[:3], " ") != "start start start" {
		t.Fatalf("three -s runs did not overlap: %v", words)
	}
	words = runLogged(t, 3, 0.2, "--exclusive", "--wait", "20s", "--pubsub", key)
	if strings.Join(words, " ") != "start end start end start end" {
		t.Fatalf("-x runs overlapped: %v", words)
	}
	if exists(t, key) {
		t.Fatal("the read-write lock is still held after the last run")
	}
	for _, args := range [][]string{{"-s", "-x"}, {"-s", "--permits", "2"}, {"--exclusive", "--permits", "1"}} {
		if code, out := exitCode(t, lockyard(append(append([]string{"run"}, args...), key, "--", "true")...)); code != exitUsage {
			t.Fatalf("run %v: exit %d (%s), want %d", args, code, out, exitUsage)
		}
	}
	// status shows the readers, and a writer waiting, with their sides.
	pool := server.Pool()
	t.Cleanup(func() { _ = pool.Close() })
	reg, err := registry.New(pool, "lockyard", registry.WithLockType(registry.PubSubLock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	l, err := reg.RWLock(key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.AcquireRead(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	w := lockyard("run", "-x", "--wait", "20s", key, "--", "true")
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, 10*time.Second, "status to show the waiting writer", func() bool {
		_, out = exitCode(t, lockyard("status", key))
		return strings.Contains(out, "waiting to write")
	})
	if !strings.Contains(out, " read ") {
		t.Fatalf("status of a read-write lock with a reader and a waiting writer:\n%s", out)
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(); err != nil {
		t.Fatalf("run -x after the reader left: %v", err)
	}
	release := holdElsewhere(t, key+"-lock")
	defer release()
	if code, out := exitCode(t, lockyard("run", "-x", "-n", key+"-lock", "--", "true")); code != exitWrongKind || !strings.Contains(out, "is a lock, not a rwlock") {
		t.Fatalf("run -x on a lock's key: exit %d, %q; want 65 naming both kinds", code, out)
	}
}

// `lockyard run KEY1 KEY2 ... -- cmd` takes every key at once: runs that
// share a key never overlap, runs on disjoint keys do; the command sees
// every key and its token; bad input is a usage error.
func TestRunSeveralKeys(t *testing.T) {
	a, b, c := newKey(t), newKey(t), newKey(t)
	words := runLogged(t, 2, 0.3, "--wait", "20s", "--pubsub", a, b)
	if strings.Join(words, " ") != "start end start end" {
		t.Fatalf("runs on the same keys overlapped: %v", words)
	}
	// {a, b} and {b, c} share b: never at once.
	log := filepath.Join(t.TempDir(), "log")
	script := fmt.Sprintf(`echo start >> %[1]s; sleep 0.3; echo end >> %[1]s`, log)
	var cmds []*exec.Cmd
	for _, keys := range [][]string{{a, b}, {c, b}} {
		cmd := lockyard(append(append([]string{"run", "--wait", "20s"}, keys...), "--", "sh", "-c", script)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(log); strings.Join(strings.Fields(string(got)), " ") != "start end start end" {
		t.Fatalf("runs sharing a key overlapped: %q", got)
	}
	if code, out := exitCode(t, lockyard("run", "--fencing", a, c, "--", "sh", "-c",
		`test "$LOCKYARD_KEYS" = "$(printf 'lockyard:%s\nlockyard:%s' "$1" "$2")" && test $(echo $LOCKYARD_TOKENS | wc -w) = 2 && test "$LOCKYARD_KEY" = "lockyard:$1"`, "sh", a, c)); code != 0 {
		t.Fatalf("the command's environment: exit %d, %s", code, out)
	}
	// Held elsewhere: -n fails at once, and takes none of the others.
	release := holdElsewhere(t, c)
	if code, _ := exitCode(t, lockyard("run", "-n", a, c, "--", "true")); code != exitNotAcquired {
		t.Fatalf("run -n beside a held key: exit %d, want %d", code, exitNotAcquired)
	}
	release()
	if exists(t, a) || exists(t, b) || exists(t, c) {
		t.Fatal("a key is still held after the runs")
	}
	// One key, and a "--" among the command's arguments: a "--" right
	// after KEY keeps the one-key form, and the later "--" reaches the
	// command.
	if code, out := exitCode(t, lockyard("run", a, "--", "sh", "-c",
		`test "$1" = "--" && test "$2" = "x" && test -z "$LOCKYARD_KEYS" && test "$LOCKYARD_KEY" = "lockyard:`+a+`"`, "sh", "--", "x")); code != 0 {
		t.Fatalf("run KEY -- COMMAND with a \"--\" argument: exit %d, %s", code, out)
	}
	for _, args := range [][]string{{a, a}, {"--permits", "2", a, b}, {"-s", a, b}, {"-x", a, b}} {
		if code, out := exitCode(t, lockyard(append(append([]string{"run"}, args...), "--", "true")...)); code != exitUsage {
			t.Fatalf("run %v: exit %d (%s), want %d", args, code, out, exitUsage)
		}
	}
}
