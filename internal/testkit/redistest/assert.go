package redistest

import (
	"context"
	"errors"
	"testing"
	"time"
)

// MustNil fails tb at once if err is not nil.
func MustNil(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// MustIs fails tb at once unless err matches target (errors.Is).
func MustIs(tb testing.TB, err, target error) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Fatalf("got error %v, want one matching %v", err, target)
	}
}

// CtxFor returns a context that ends after d or at the end of the test.
func CtxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
