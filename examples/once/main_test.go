package main

import (
	"bytes"
	"testing"
)

func TestOnceExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := `replica-2: skipped: running on another replica
replica-1: ran the report
replica-3: skipped: already done today
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
