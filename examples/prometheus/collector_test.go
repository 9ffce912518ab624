package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lockyard/lockyard/registry"
)

func TestCollector(t *testing.T) {
	mr := miniredis.RunT(t)
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", mr.Addr()) }}
	defer pool.Close()
	reg, err := registry.New(pool, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := reg.ExecuteLocked(ctx, "order-42", func(context.Context) error { return nil })
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := NewCollector(reg, "orders")
	want := `
# HELP lockyard_acquisitions_total Outermost lock acquisitions.
# TYPE lockyard_acquisitions_total counter
lockyard_acquisitions_total{registry="orders"} 3
# HELP lockyard_cached_locks Locks in the registry's cache.
# TYPE lockyard_cached_locks gauge
lockyard_cached_locks{registry="orders"} 1
# HELP lockyard_held Locks, leases and permits held now.
# TYPE lockyard_held gauge
lockyard_held{registry="orders"} 0
# HELP lockyard_lost_locks_total Holds lost before their release.
# TYPE lockyard_lost_locks_total counter
lockyard_lost_locks_total{registry="orders"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"lockyard_acquisitions_total", "lockyard_cached_locks", "lockyard_held", "lockyard_lost_locks_total"); err != nil {
		t.Fatal(err)
	}
	// The histogram has every bucket and counts the 3 waits.
	prom := prometheus.NewRegistry()
	prom.MustRegister(c)
	families, err := prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range families {
		bounds := map[string]int{"lockyard_wait_seconds": len(registry.WaitBuckets), "lockyard_hold_seconds": len(registry.HoldBuckets)}[f.GetName()]
		if bounds == 0 {
			continue
		}
		found++
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 3 || len(h.GetBucket()) != bounds {
			t.Fatalf("%s: %d samples, %d buckets", f.GetName(), h.GetSampleCount(), len(h.GetBucket()))
		}
	}
	if found != 2 {
		t.Fatal("no lockyard_wait_seconds and lockyard_hold_seconds")
	}
}

// Without -redis or REDIS_ADDR the example runs on an embedded Redis, as
// the other examples do, instead of failing against 127.0.0.1:6379.
func TestEmbeddedRedisByDefault(t *testing.T) {
	p, done, err := redisPool("")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	reg, err := registry.New(p.Pool, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.ExecuteLocked(ctx, "order-42", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("ExecuteLocked on the embedded Redis: %v", err)
	}
}
