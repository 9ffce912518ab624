package clienttest

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// BenchLockUnlock measures uncontended Lock+Unlock on c, 16 goroutines
// with a key each, and reports the CPU time the servers at addrs spent per
// cycle (srv-us/op: user plus system, from INFO cpu), which bounds the
// cycles per second one server core can take.
func BenchLockUnlock(b *testing.B, c registry.Client, addrs ...string) {
	r := NewRegistry(b, c, "bench-"+strconv.Itoa(b.N))
	b.SetParallelism(8)
	cpu0 := serverCPU(b, addrs)
	defer func() {
		b.ReportMetric(float64((serverCPU(b, addrs)-cpu0).Microseconds())/float64(b.N), "srv-us/op")
	}()
	ParallelLockUnlock(b, r)
}

// ParallelLockUnlock runs Lock+Unlock on r in parallel, one key per
// goroutine.
func ParallelLockUnlock(b *testing.B, r *registry.Registry) {
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		l, err := r.Obtain(strconv.FormatInt(seq.Add(1), 10))
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			l.Lock()
			//lint:ignore SA2001 the acquire and release are what is measured
			l.Unlock()
		}
	})
}

// serverCPU returns the CPU time used by the servers at addrs.
func serverCPU(b *testing.B, addrs []string) time.Duration {
	var sum time.Duration
	for _, a := range addrs {
		c, err := redis.Dial("tcp", a)
		if err != nil {
			b.Fatal(err)
		}
		d, err := redistest.ServerCPU(c)
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		sum += d
	}
	return sum
}
