package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Like flock(1), run waits for a held lock by default, and runs the
// command once the holder releases it.
func TestRunWaitsByDefault(t *testing.T) {
	key := newKey(t)
	release := holdElsewhere(t, key)
	ran := filepath.Join(t.TempDir(), "ran")
	cmd := lockyard("run", key, "sh", "-c", ": > "+ran) // no "--": it is optional
	done := make(chan int, 1)
	go func() { code, _ := exitCode(t, cmd); done <- code }()
	select { // nothing may run while the lock is held
	case code := <-done:
		t.Fatalf("run exited %d while the lock was held elsewhere", code)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran while the lock was held elsewhere")
	}
	release()
	select {
	case code := <-done:
		if _, err := os.Stat(ran); code != 0 || err != nil {
			t.Fatalf("after the release: exit %d, command ran: %v", code, err == nil)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run still waits 10s after the release")
	}
}

// A REDIS_URL that cannot name a server is a usage error (64), not an
// unavailable server (69), for every command.
func TestMalformedRedisURL(t *testing.T) {
	for _, u := range []string{"localhost:6391", "http://127.0.0.1:6379", "redis://127.0.0.1:port", "/abc", "redis://:6379", "redis://127.0.0.1:0"} {
		for _, args := range [][]string{{"run", "k", "--", "true"}, {"status"}, {"release", "--force", "k"}} {
			cmd := lockyard(args...)
			cmd.Env = append(cmd.Env, "REDIS_URL="+u)
			if code, out := exitCode(t, cmd); code != exitUsage || !strings.Contains(out, "URL") {
				t.Errorf("REDIS_URL=%s lockyard %s: exit %d (%s), want %d", u, args[0], code, strings.TrimSpace(out), exitUsage)
			}
		}
	}
}

// A command that is not found exits 127, one that exists but cannot be
// executed 126, as a shell does.
func TestRunCommandNotExecutable(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\ntrue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]int{notExec: 126, filepath.Join(t.TempDir(), "missing"): 127, "no-such-command-lockyard": 127} {
		if code, out := exitCode(t, lockyard("run", newKey(t), "--", cmd)); code != want {
			t.Errorf("run %s: exit %d (%s), want %d", cmd, code, out, want)
		}
	}
}

// A command that ignores the on-lost SIGTERM is killed --kill-after later:
// it does not run on beside the lock's next holder.
func TestRunKillAfter(t *testing.T) {
	key := newKey(t)
	ready := filepath.Join(t.TempDir(), "ready")
	script := "trap '' TERM; : > " + ready + "; n=0; while [ $n -lt 3000 ]; do sleep 0.02; n=$((n+1)); done"
	cmd := lockyard("run", "--ttl", "300ms", "--kill-after", "300ms", key, "--", "sh", "-c", script)
	done := make(chan int, 1)
	go func() { code, _ := exitCode(t, cmd); done <- code }()
	waitFor(t, 5*time.Second, "the command", func() bool { return fileExists(ready) })
	if code, out := exitCode(t, lockyard("release", "--force", key)); code != 0 {
		t.Fatalf("release --force: exit %d: %s", code, out)
	}
	select {
	case code := <-done:
		if code != exitLost {
			t.Fatalf("run exited %d, want %d (lost)", code, exitLost)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a command that ignores SIGTERM still runs 10s after its lock was lost")
	}
}

// status prints every key so that it cannot break the table or reach the
// terminal as a control sequence, and marks keys under the registry key
// that are not locks instead of calling them held.
func TestStatusEscapesAndMarksNonLocks(t *testing.T) {
	base := newKey(t)
	nl, esc := base+"-a\nb", base+"-\x1b[31m"
	for _, k := range []string{nl, esc} {
		if _, err := server.Do("SET", "lockyard:"+k, "id:0000000000000001", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	plain, hash := base+"-plain", base+"-hash"
	if _, err := server.Do("SET", "lockyard:"+plain, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Do("HSET", "lockyard:"+hash, "f", "v"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, k := range []string{nl, esc, plain, hash} {
			_, _ = server.Do("DEL", "lockyard:"+k)
		}
	})
	code, out := exitCode(t, lockyard("status"))
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	if strings.ContainsRune(out, '\x1b') || strings.Contains(out, "-a\nb") {
		t.Fatalf("status printed a raw control character:\n%q", out)
	}
	for _, want := range []string{`"` + base + `-a\nb"`, `"` + base + `-\x1b[31m"`} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not show %s escaped:\n%s", want, out)
		}
	}
	for k, state := range map[string]string{plain: "not a lock (holds a string without a TTL)", hash: "not a lock (holds a hash)"} {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, k+" ") {
				line = l
			}
		}
		if !strings.Contains(line, state) {
			t.Errorf("status line of %s = %q, want %q", k, line, state)
		}
	}
	// Named alone, neither is held (exit 1), and release --force leaves
	// them (65) unless told that a string without a TTL may go.
	for _, k := range []string{plain, hash} {
		if code, out := exitCode(t, lockyard("status", k)); code != exitFree {
			t.Errorf("status %s: exit %d, want %d (not held):\n%s", k, code, exitFree, out)
		}
		if code, out := exitCode(t, lockyard("release", "--force", k)); code != exitWrongKind {
			t.Errorf("release --force %s: exit %d, want %d (no lock):\n%s", k, code, exitWrongKind, out)
		}
	}
	if n, err := redis.Int(server.Do("EXISTS", "lockyard:"+plain, "lockyard:"+hash)); err != nil || n != 2 {
		t.Fatalf("after release --force of keys that are no locks: %d of 2 left (%v)", n, err)
	}
	if code, out := exitCode(t, lockyard("release", "--force", "--foreign", plain)); code != 0 {
		t.Errorf("release --force --foreign of a string without a TTL: exit %d:\n%s", code, out)
	}
	if n, err := redis.Int(server.Do("EXISTS", "lockyard:"+plain)); err != nil || n != 0 {
		t.Fatalf("release --force --foreign left the string (%v)", err)
	}
}
