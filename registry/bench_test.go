package registry_test

import (
	"testing"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Nested (reentrant) Lock+Unlock of a held lock: no Redis command.
func BenchmarkNestedLockUnlock(b *testing.B) {
	mr := newMiniredis(b)
	pool := redistest.NewPool(mr.Addr())
	defer pool.Close()
	cp := &redistest.CountingPool{Pool: pool}
	r := newRegPrefix(b, cp, "bench")
	l, err := r.Obtain("k")
	if err != nil {
		b.Fatal(err)
	}
	l.Lock()
	defer l.Unlock()
	cp.Commands()
	b.ReportAllocs()
	for b.Loop() {
		l.Lock()
		//lint:ignore SA2001 the nested acquire and release are what is measured
		l.Unlock()
	}
	if n := len(cp.Commands()); n != 0 {
		b.Fatalf("%d Redis commands for nested acquisitions", n)
	}
}

// Uncontended Lock+Unlock on the real server: two round trips.
func BenchmarkLockUnlock(b *testing.B) {
	pool := redistest.NewPool(real.Addr)
	defer pool.Close()
	r := newRegPrefix(b, pool, "bench-lu")
	l, err := r.Obtain("k")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l.Lock()
		//lint:ignore SA2001 the acquire and release are what is measured
		l.Unlock()
	}
}

// Uncontended Lock+Unlock on Redlock over 5 real servers (two parallel
// rounds of 5 scripts); -parallel keys: one per goroutine.
func BenchmarkRedlockLockUnlock(b *testing.B) {
	var clients []registry.Client
	for range 5 {
		s, err := redistest.Start()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		p := s.Pool()
		defer p.Close()
		clients = append(clients, registry.NewPoolClient(p))
	}
	r, err := registry.NewRedlock(clients, "bench-rl")
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	clienttest.ParallelLockUnlock(b, r)
}

// Uncontended Lock+Unlock on the single real server, one key per
// goroutine: the throughput of one node (compare with -cpu).
func BenchmarkParallelLockUnlock(b *testing.B) {
	pool := redistest.NewPool(real.Addr)
	defer pool.Close()
	r := newRegPrefix(b, pool, "bench-plu")
	clienttest.ParallelLockUnlock(b, r)
}

// Lock+Unlock of one key by 8 goroutines of one registry on the real
// server: most acquisitions are local hand-offs (free passes, and a pass
// script every ninth).
func BenchmarkLocalHandOff(b *testing.B) {
	pool := redistest.NewPool(real.Addr)
	defer pool.Close()
	r := newRegPrefix(b, pool, "bench-ho")
	l, err := r.Obtain("k")
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(4) // 8 goroutines on 2 CPUs
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Lock()
			//lint:ignore SA2001 the acquire and release are what is measured
			l.Unlock()
		}
	})
}

// Uncontended AcquireAll+Release of 5 keys on the real server: two round
// trips (multitake.lua, multidrop.lua).
func BenchmarkAcquireAllRelease(b *testing.B) {
	pool := redistest.NewPool(real.Addr)
	defer pool.Close()
	r := newRegPrefix(b, pool, "bench-aa")
	keys := []string{"a", "b", "c", "d", "e"}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		le, err := r.AcquireAll(ctx, keys, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
