package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestLockerExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("output:\n%s", out.String())
	}
	// The RedisLock line is exact; the sync.Mutex line oversells almost
	// always, but timing decides by how much.
	if want := "*registry.RedisLock:    sold 20 of 20 (oversold: false)"; lines[1] != want {
		t.Fatalf("got %q, want %q", lines[1], want)
	}
	if !strings.HasPrefix(lines[0], "sync.Mutex per replica: sold ") {
		t.Fatalf("got %q", lines[0])
	}
	t.Log(lines[0])
}
