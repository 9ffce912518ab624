package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/internal/redistest"
	"github.com/lockyard/lockyard/registry"
)

// With the go-redis options the package doc recommends (MaxRetries -1,
// ContextTimeoutEnabled), a registry on a server that is down fails as it
// does on redigo: LockContext's error carries the connection error, every
// failed attempt counts in Stats.RedisErrors, and TryLock returns within
// go-redis's own dial retries rather than its command retries.
func TestServerDownRecommendedOptions(t *testing.T) {
	port, err := redistest.FreePort()
	mustNil(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	r, err := registry.NewWithClient(goredis.NewClient(rdb), prefix(t), registry.WithLogger(quiet))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	l, err := r.Obtain("k")
	mustNil(t, err)
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
	mustIs(t, err, context.DeadlineExceeded)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("LockContext = %v: want the connection error, not only the deadline", err)
	}
	if n := r.Stats().RedisErrors; n < 3 {
		t.Errorf("Stats.RedisErrors = %d after a TryLock and 2s of attempts, want one per failed attempt", n)
	}
}
