package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
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

// The README's line for this demo says what the demo, run as it is,
// prints: every export at once without the semaphore, the limit with it.
func TestPartnerAPIReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.Contains(l, "[`examples/partnerapi`]") {
			line = l
		}
	}
	c := defaults
	mr := miniredis.RunT(t)
	free, err := round(mr.Addr(), false, c)
	if err != nil {
		t.Fatal(err)
	}
	capped, err := round(mr.Addr(), true, c)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("without it up to %d calls at once (%d replicas × %d exports), with it exactly %d", c.replicas*c.exports, c.replicas, c.exports, c.limit)
	if !strings.Contains(line, want) {
		t.Fatalf("README says %q; the demo's defaults say %q", line, want)
	}
	if free.most <= c.limit || free.most > c.replicas*c.exports || capped.most != c.limit {
		t.Fatalf("the demo shows %d at once without the semaphore, %d with it; the README: %q", free.most, capped.most, want)
	}
}
