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
