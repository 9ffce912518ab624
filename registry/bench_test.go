package registry_test

import (
	"testing"

	"github.com/lockyard/lockyard/internal/redistest"
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
