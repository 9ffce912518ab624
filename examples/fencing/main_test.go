package main

import (
	"bytes"
	"testing"
)

func TestFencingExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := `A holds the lock with token 1
A is paused past its TTL: lost
B holds the lock with token 2
B writes with token 2: accepted
A (resumed) writes with token 1: rejected (stale token)
A's unlock: lockyard: lock lost: "records:record-7" expired or was taken by another holder
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
