package clienttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// ServerDown: a registry on c, a client of a server that is down, fails as
// it does on redigo: TryLock returns within 2s, LockContext's error carries
// the connection error, and every failed attempt counts in
// Stats.RedisErrors.
func ServerDown(t *testing.T, c registry.Client) {
	r := NewRegistry(t, c, prefix(t))
	l, err := r.Obtain("k")
	redistest.MustNil(t, err)
	start := time.Now()
	if l.TryLock() {
		t.Fatal("TryLock succeeded with the server down")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("TryLock took %v with the server down", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = l.LockContext(ctx)
	redistest.MustIs(t, err, context.DeadlineExceeded)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("LockContext = %v: want the connection error, not only the deadline", err)
	}
	if n := r.Stats().RedisErrors; n < 3 {
		t.Errorf("Stats.RedisErrors = %d after a TryLock and 2s of attempts, want one per failed attempt", n)
	}
}
