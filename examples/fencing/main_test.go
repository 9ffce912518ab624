package main

import (
	"bytes"
	"fmt"
	"testing"
)

func TestFencingExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	var a int64
	if _, err := fmt.Sscanf(out.String(), "A holds the lock with token %d\n", &a); err != nil || a <= 0 {
		t.Fatalf("output:\n%s\nno token for A: %v", out.String(), err)
	}
	b := a + 1 // the next token of the key
	want := fmt.Sprintf(`A holds the lock with token %d
A is paused past its TTL: lost
B holds the lock with token %d
B writes with token %d: accepted
A (resumed) writes with token %d: rejected (stale token)
A's unlock: lockyard: lock lost: "records:record-7" expired or was taken by another holder
`, a, b, b, a)
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
