package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// With the RWLock no reader sees a torn price list, readers still read side
// by side, and the writer gets in; without it readers see torn pairs.
func TestRWLockDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	c := config{replicas: 3, readers: 3, writes: 8, gap: 3 * time.Millisecond}
	var out bytes.Buffer
	if err := run(&out, mr.Addr(), c); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	locked, err := round(mr.Addr(), true, c)
	if err != nil {
		t.Fatal(err)
	}
	if locked.torn != 0 || locked.most < 2 || locked.reads == 0 {
		t.Fatalf("with the RWLock: %d torn reads of %d, at most %d readers at once; want none torn, readers side by side", locked.torn, locked.reads, locked.most)
	}
	free, err := round(mr.Addr(), false, c)
	if err != nil {
		t.Fatal(err)
	}
	if free.torn == 0 {
		t.Fatalf("without a lock no torn read in %d: the demo shows nothing", free.reads)
	}
}
