package core

import (
	"testing"
	"time"
)

// The free-pass rule (Run.FreePass), table-driven with a fixed clock: no
// command while the run is young, unfenced and unbounded, fewer than
// MaxFreePasses since the last command and within the free span of it,
// for the hold's own TTL with three quarters of it left.
func TestFreePass(t *testing.T) {
	const ttl, span = 10 * time.Second, 5 * time.Millisecond
	c := &Core{}
	at := func(d time.Duration) int64 { return int64(d) }
	cases := []struct {
		name    string
		run     Run
		now     int64
		next    time.Duration
		fenced  bool
		bounded bool
		want    bool
	}{
		{name: "young run", now: at(time.Millisecond), next: ttl, want: true},
		{name: "fenced", now: at(time.Millisecond), next: ttl, fenced: true},
		{name: "bounded", now: at(time.Millisecond), next: ttl, bounded: true},
		{name: "passes used up", run: Run{Passes: MaxFreePasses}, now: at(time.Millisecond), next: ttl},
		{name: "one pass left", run: Run{Passes: MaxFreePasses - 1}, now: at(time.Millisecond), next: ttl, want: true},
		{name: "last command too long ago", now: at(span), next: ttl},
		{name: "another TTL", now: at(time.Millisecond), next: ttl / 2},
		{name: "under three quarters left", now: at(ttl/4 + time.Millisecond), run: Run{LastCmd: at(ttl/4 + time.Millisecond - 1)}, next: ttl},
	}
	for _, tc := range cases {
		h := NewHold(c, "k", "t", 0, ttl, int64(ttl), nil, nil)
		r := tc.run
		before := r.Passes
		if got := r.FreePass(h, tc.next, tc.now, span, tc.fenced, tc.bounded); got != tc.want {
			t.Errorf("%s: free pass %v, want %v", tc.name, got, tc.want)
		}
		if counted := r.Passes - before; tc.want && counted != 1 || !tc.want && counted != 0 {
			t.Errorf("%s: %d passes counted", tc.name, counted)
		}
	}
	var r Run
	r.Begin(at(time.Second))
	if !r.Bounded(at(time.Second+span), span) || r.Bounded(at(time.Second+span-1), span) {
		t.Error("a run is bounded once it has lasted its span, not before")
	}
	r.Passes = 3
	r.Sent(at(2 * time.Second))
	if r.Passes != 0 || r.LastCmd != at(2*time.Second) || r.Since != at(time.Second) {
		t.Errorf("after a command: %+v", r)
	}
}
