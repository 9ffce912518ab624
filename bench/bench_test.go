package main

import (
	"math"
	"slices"
	"testing"
)

// The parser counts each command once however the writes split it, and
// notes its name.
func TestRespParserSplits(t *testing.T) {
	stream := []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$12\r\n*2\r\n$3\r\nbad\r\n")
	for size := 1; size <= len(stream); size++ {
		var p respParser
		var n int64
		var c counter
		for i := 0; i < len(stream); i += size {
			n += p.feed(stream[i:min(i+size, len(stream))], &c.names)
		}
		if n != 2 {
			t.Fatalf("writes of %d bytes: %d commands, want 2 (a payload that looks like RESP is not one)", size, n)
		}
		got := c.sent()
		if slices.Sort(got); !slices.Equal(got, []string{"get", "set"}) {
			t.Fatalf("writes of %d bytes: names %q, want get and set", size, got)
		}
	}
}

// analyze finds overlapping critical sections on one key and measures
// fairness over every goroutine, including one that got nothing.
func TestAnalyze(t *testing.T) {
	recs := []rec{
		{Proc: 0, G: 0, Key: "k", Wait: 0, Acq: 10, Rel: 20, Done: 21},
		{Proc: 1, G: 0, Key: "k", Wait: 5, Acq: 19, Rel: 30, Done: 31}, // overlaps the first
		{Proc: 0, G: 0, Key: "j", Wait: 0, Acq: 12, Rel: 15, Done: 16}, // another key: no overlap
	}
	m := analyze(recs, 0, 1e9, 3, 2)
	if m["violations"] != 1 {
		t.Fatalf("violations = %v, want 1", m["violations"])
	}
	if want := 9.0 / 15; math.Abs(m["jain"]-want) > 1e-9 { // counts 2, 1, 0
		t.Fatalf("jain = %v, want %v", m["jain"], want)
	}
	if m["acq/s"] != 3 {
		t.Fatalf("acq/s = %v, want 3", m["acq/s"])
	}
}
