package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// With the semaphore the replicas never exceed the partner's limit, and
// reach it; without it they exceed it.
func TestPartnerAPIDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	c := config{replicas: 3, exports: 4, limit: 3, call: 20 * time.Millisecond}
	var out bytes.Buffer
	if err := run(&out, mr.Addr(), c); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	capped, err := round(mr.Addr(), true, c)
	if err != nil {
		t.Fatal(err)
	}
	if capped.most != c.limit || capped.calls != c.replicas*c.exports {
		t.Fatalf("with the semaphore: %d calls, at most %d at once; want %d calls, at most exactly %d", capped.calls, capped.most, c.replicas*c.exports, c.limit)
	}
	free, err := round(mr.Addr(), false, c)
	if err != nil {
		t.Fatal(err)
	}
	if free.most <= c.limit {
		t.Fatalf("without the semaphore at most %d calls at once: the demo shows nothing", free.most)
	}
}
