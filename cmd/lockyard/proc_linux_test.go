package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// If lockyard is SIGKILLed, a command that ignores the on-lost SIGTERM is
// SIGKILLed by the reaper before the key can lapse (here within half the
// 4s TTL, --kill-after being longer): it never runs beside the next holder.
func TestRunKilledCommandReaped(t *testing.T) {
	key, pidFile := newKey(t), filepath.Join(t.TempDir(), "pid")
	script := "trap '' TERM; " + pidCommand(pidFile, "n=0; while [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done")
	cmd := lockyard("run", "--ttl", "4s", "--kill-after", "30s", key, "--", "sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := pidFromFile(t, pidFile)
	killed := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitFor(t, 4*time.Second, "the command to be gone before the key's TTL ends", func() bool { return !running(pid) })
	if d := time.Since(killed); d < time.Second {
		t.Fatalf("the command was gone %v after lockyard, before half the TTL: killed by what?", d)
	}
}

// running reports whether process pid runs: it exists and is not a zombie
// (killed, and not yet reaped by the parent it was given when lockyard
// died).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// pidFromFile polls for a file holding a pid, as a command writes it.
func pidFromFile(t *testing.T, name string) int {
	t.Helper()
	waitFor(t, 5*time.Second, "the command's pid file", func() bool { return fileExists(name) })
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// pidCommand returns a shell script that writes its pid to name (whole,
// by a rename) and then runs rest.
func pidCommand(name, rest string) string {
	return "echo $$ > " + name + ".tmp; mv " + name + ".tmp " + name + "; " + rest
}

// reaperOf returns the pid of the `lockyard __reap` child of process
// parent, or 0.
func reaperOf(parent int) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		if argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(argv), "__reap") {
			return pid
		}
	}
	return 0
}

// When lockyard dies, the reaper never holds lockyard's stderr: a caller
// reading lockyard's output ($(...), a CI log) sees its end at once, not
// half the TTL later. And the reaper does not wait out its grace once the
// command is gone.
func TestRunReaperLetsGo(t *testing.T) {
	key, pidFile := newKey(t), filepath.Join(t.TempDir(), "pid")
	// The command lets go of lockyard's output itself, and ignores SIGTERM.
	script := "exec >/dev/null 2>&1; trap '' TERM; " + pidCommand(pidFile, "n=0; while [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done")
	cmd := lockyard("run", "--ttl", "20s", key, "--", "sh", "-c", script)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := pidFromFile(t, pidFile)
	reaper := reaperOf(cmd.Process.Pid)
	if reaper == 0 {
		t.Fatal("no reaper beside the command")
	}
	killed := time.Now()
	_ = cmd.Process.Kill()
	eof := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, stderr)
		eof <- time.Since(killed)
	}()
	select {
	case d := <-eof:
		t.Logf("lockyard's stderr ended %v after its death", d)
	case <-time.After(5 * time.Second): // the reaper's grace is 10s
		t.Fatal("lockyard's stderr still open 5s after its death: the reaper holds it")
	}
	_ = cmd.Wait()
	if !running(pid) || !running(reaper) {
		t.Fatal("the command (it ignores SIGTERM) or the reaper ended before the grace")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL) // the command ends by other means
	waitFor(t, 5*time.Second, "the reaper to exit once the command is gone", func() bool { return !running(reaper) })
}

// --on-lost none never signals the command, lockyard's own death included:
// no parent-death signal, no reaper.
func TestRunOnLostNoneNotReaped(t *testing.T) {
	key, pidFile := newKey(t), filepath.Join(t.TempDir(), "pid")
	cmd := lockyard("run", "--ttl", "1s", "--on-lost", "none", key, "--", "sh", "-c", pidCommand(pidFile, "exec sleep 30"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := pidFromFile(t, pidFile)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The grace would be 500ms: the command must outlive it by far.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if !running(pid) {
			t.Fatal("--on-lost none: the command was killed after lockyard died")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under nohup, SIGHUP is ignored from the start: lockyard must leave it
// so, for itself and the command (signal.Notify would turn it back on).
func TestRunIgnoredHangupStaysIgnored(t *testing.T) {
	dir := t.TempDir()
	pidFile, done := filepath.Join(dir, "pid"), filepath.Join(dir, "done")
	cmd := lockyard("run", newKey(t), "--", "sh", "-c", pidCommand(pidFile, "sleep 0.5; : > "+done))
	// As nohup does: ignore SIGHUP, then exec lockyard.
	cmd.Args = append([]string{"sh", "-c", `trap '' HUP; exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pidFromFile(t, pidFile)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("lockyard run under nohup, after SIGHUP: %v, want exit 0\n%s", err, out.String())
	}
	if !fileExists(done) {
		t.Fatal("the command did not finish")
	}
}
