package redistest

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5ms until it holds, and fails tb if d passes
// first: the deadline poll that tests use instead of a bare sleep.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval of a deadline loop
	}
}

// Next receives from ch until match accepts a value, which it returns,
// dropping the others; it fails tb if d passes first.
func Next[T any](tb testing.TB, ch <-chan T, d time.Duration, what string, match func(T) bool) T {
	tb.Helper()
	timeout := time.After(d)
	for {
		select {
		case v := <-ch:
			if match(v) {
				return v
			}
		case <-timeout:
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
