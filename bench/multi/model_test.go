package main

import (
	"math"
	"testing"
	"time"
)

// The model's figures where they can be worked out by hand, and the
// orders it must keep.
func TestMultiModel(t *testing.T) {
	const sec, rtt = 2 * time.Millisecond, 200 * time.Microsecond
	secs := []time.Duration{sec}
	ways := multiModelWays(10 * time.Millisecond)
	for _, way := range ways {
		// One caller alone: a section, the reply and the release, and the
		// next try's way to the server, every time.
		got, share := simulateMulti(way, 1, 12, 3, secs, rtt, 10*time.Second, 1)
		if want := 1 / (sec + 2*rtt).Seconds(); math.Abs(got-want) > want*0.01 || share != 1 {
			t.Errorf("%s, one caller: %.1f/s, share %.2f; want %.1f/s, share 1", way.name, got, share, want)
		}
		// Every caller wants every key: one at a time, so no faster than
		// one caller alone, and the retrying one much slower.
		got, _ = simulateMulti(way, 16, 3, 3, secs, rtt, 10*time.Second, 1)
		if most := 1 / (sec + rtt).Seconds(); got > most*1.01 {
			t.Errorf("%s, all keys: %.1f/s, more than one at a time allows (%.1f/s)", way.name, got, most)
		}
	}
	// The random shape: the callers that are woken beat the ones that
	// retry every 10 ms; in order, nobody's share falls behind, where the
	// woken ones alone let some fall far behind.
	rate := map[string]float64{}
	shares := map[string]float64{}
	for _, way := range ways {
		rate[way.name], shares[way.name] = simulateMulti(way, 16, 12, 3, secs, rtt, 20*time.Second, 1)
	}
	if rate["woken, 0.25 ms"] < 1.2*rate["retry every 10ms"] || rate["woken, 1 ms"] >= rate["woken, 0.25 ms"] ||
		rate["in order, 0.25 ms"] >= rate["retry every 10ms"] {
		t.Errorf("random: %v; want woken (0.25 ms) at least 1.2x the retrying, and faster than woken (1 ms); "+
			"in order slower than the retrying (a caller waits for every caller before it that shares a key)", rate)
	}
	if shares["in order, 0.25 ms"] < 0.9 || shares["woken, 0.25 ms"] > 0.6 || shares["woken then in order, 0.25 ms"] <= shares["woken, 0.25 ms"] {
		t.Errorf("random: smallest shares %v; want in order ≥ 0.9, woken alone ≤ 0.6, and woken then in order above woken alone", shares)
	}
}
