package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// status is built on Registry.Inspect: it shows a lock's holder and its
// waiters with their labels, as a table or as JSON, and its exit status
// says whether the keys are held (0), free (1), or bad input (64).
func TestStatusInspect(t *testing.T) {
	key := newKey(t)
	pool := server.Pool()
	t.Cleanup(func() { _ = pool.Close() })
	newReg := func(label string) *registry.Registry {
		r, err := registry.New(pool, "lockyard", registry.WithLabel(label), registry.WithLockType(registry.PubSubLock))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	holder, err := newReg("worker-1").Acquire(context.Background(), key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() {
		le, err := newReg("worker-2").Acquire(ctx, key, 0)
		if err == nil {
			err = le.Release(context.Background())
		}
		waited <- err
	}()
	t.Cleanup(func() { cancel(); <-waited })
	waitFor(t, 5*time.Second, "a waiter", func() bool {
		_, out := exitCode(t, lockyard("status", key))
		return strings.Contains(out, "waiting")
	})

	code, out := exitCode(t, lockyard("status", key))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("status %s (exit %d): want a header, a held line and a waiting line:\n%s", key, code, out)
	}
	if f := strings.Fields(lines[1]); len(f) != 6 || f[1] != "held" || f[5] != "worker-1" {
		t.Errorf("held line %q: want the holder's label worker-1", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) != 7 || f[1] != "waiting" || f[6] != "worker-2" {
		t.Errorf("waiting line %q: want the waiter's label worker-2", lines[2])
	}

	code, out = exitCode(t, lockyard("status", "--json", key))
	var got jsonKey
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("status --json (exit %d): %v\n%s", code, err, out)
	}
	if got.Name != key || got.Key != "lockyard:"+key || got.Kind != "lock" || len(got.Holders) != 1 || got.Holders[0].Label != "worker-1" ||
		got.Holders[0].TTLMs <= 0 || !strings.HasPrefix(got.Holders[0].Token, got.Holders[0].Registry+":") || len(got.Waiters) != 1 || got.Waiters[0].Label != "worker-2" {
		t.Errorf("status --json: %+v", got)
	}

	if code, out := exitCode(t, lockyard("status", key+"-free")); code != exitFree || !strings.Contains(out, "free") {
		t.Errorf("status of a free key: exit %d, want %d:\n%s", code, exitFree, out)
	}
	if code, out := exitCode(t, lockyard("status", key, key+"-free")); code != exitFree {
		t.Errorf("status of a held and a free key: exit %d, want %d:\n%s", code, exitFree, out)
	}
	if code, out := exitCode(t, lockyard("status", "")); code != exitUsage {
		t.Errorf("status of an empty key: exit %d, want %d:\n%s", code, exitUsage, out)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
