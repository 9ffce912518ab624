package main

import (
	"math"
	"testing"
	"time"
)

// The model's figures where they can be worked out by hand: every order
// serves writes only one at a time (the mutex's 1/section), reads only
// all together (16 per section), and a hand-over costs only the sections
// that waited for one.
func TestModelBounds(t *testing.T) {
	const sec = 2 * time.Millisecond
	secs := []time.Duration{sec}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.01 {
			t.Errorf("%s: %.1f sections/s, want %.1f", name, got, want)
		}
	}
	for _, order := range modelOrders {
		near(order+", writes only", simulate(order, 16, 1, secs, 0, 10*time.Second, 1), 500)
		near(order+", writes only, 500µs hand-overs", simulate(order, 16, 1, secs, 500*time.Microsecond, 10*time.Second, 1), 400)
		if order != "mutex" {
			near(order+", reads only", simulate(order, 16, 0, secs, 500*time.Microsecond, 10*time.Second, 1), 8000)
		}
	}
	// The mix: between the mutex and all reads, and the phase-fair order,
	// which lets in every reader waiting when a writer leaves, no lower than
	// the line's.
	line := simulate("line", 16, 0.1, secs, 0, 30*time.Second, 1)
	phase := simulate("phase-fair", 16, 0.1, secs, 0, 30*time.Second, 1)
	if line <= 2*500 || line >= 8000 || phase < line {
		t.Errorf("mix: line %.0f, phase-fair %.0f sections/s; want both in (1000, 8000), phase-fair ≥ line", line, phase)
	}
}
