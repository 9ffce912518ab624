package registry

import (
	"math"
	"testing"
	"time"
)

// How long free passes go on after the last command on one of a key's
// holds (engine.freeSpan): a lock's, and a semaphore's of 1 permit, the
// registry's span; a semaphore's of several permits twice that, whatever
// their number, at most a run's bound unless the span alone is longer.
func TestFreeSpan(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		free, chain time.Duration
		holds       int
		want        time.Duration
	}{
		{freePassSpan, chainSpan, 0, 5 * ms}, // the defaults: 5 ms, runs of 24 ms
		{freePassSpan, chainSpan, 1, 5 * ms},
		{freePassSpan, chainSpan, 2, 10 * ms},
		{freePassSpan, chainSpan, 3, 10 * ms},
		{freePassSpan, chainSpan, math.MaxInt, 10 * ms},
		{20 * ms, chainSpan, 2, chainSpan},
		{time.Minute, time.Minute, 2, time.Minute},
		{time.Minute, time.Second, 3, time.Minute}, // a span past the bound is left as it is
		{time.Nanosecond, time.Minute, 3, 2 * time.Nanosecond},
	} {
		r := &engine{cfg: config{freePassSpan: tc.free, chainSpan: tc.chain}}
		if got := r.freeSpan(tc.holds); got != tc.want {
			t.Errorf("span %v, bound %v: freeSpan(%d) = %v, want %v", tc.free, tc.chain, tc.holds, got, tc.want)
		}
	}
}
