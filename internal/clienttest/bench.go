package clienttest

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/redistest"
	"github.com/lockyard/lockyard/registry"
)

// BenchLockUnlock measures uncontended Lock+Unlock on c, 16 goroutines
// with a key each, and reports the CPU time the servers at addrs spent per
// cycle (srv-us/op: user plus system, from INFO cpu), which bounds the
// cycles per second one server core can take.
func BenchLockUnlock(b *testing.B, c registry.Client, addrs ...string) {
	r := newRegistry(b, c, "bench-"+strconv.Itoa(b.N))
	var seq atomic.Int64
	b.SetParallelism(8)
	cpu0 := serverCPU(b, addrs)
	defer func() {
		b.ReportMetric((serverCPU(b, addrs)-cpu0)*1e6/float64(b.N), "srv-us/op")
	}()
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

// serverCPU returns the CPU seconds used by the servers at addrs.
func serverCPU(b *testing.B, addrs []string) float64 {
	var sum float64
	for _, a := range addrs {
		info, err := redis.String(redistest.Do(a, "INFO", "cpu"))
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			i := strings.Index(info, f)
			if i < 0 {
				b.Fatalf("INFO cpu has no %s", f)
			}
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.SplitN(info[i+len(f):], "\n", 2)[0]), 64)
			sum += v
		}
	}
	return sum
}
