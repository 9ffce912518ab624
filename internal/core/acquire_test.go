package core

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// newTestCore returns a Core for the waiting loop alone: no executor.
func newTestCore(t *testing.T) *Core {
	t.Helper()
	c := &Core{Epoch: time.Now(), Counters: NewCounters(), BG: NewGroup(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t.Cleanup(c.BG.Close)
	return c
}

// listens counts the refused attempts it is told of.
type listens struct{ n atomic.Int32 }

func (l *listens) Listen(*Waker) { l.n.Add(1) }

// The engine's waiting loop (Core.Acquire) alone, with a fake attempt:
// it tries until the attempt acquires, tells the listener after each
// refusal, retries errors with backoff (transient ones, or every one with
// RetryAll), ends at once on a final one, and ends with ctx's error,
// wrapping the last Redis error, when ctx ends; a local hand-off ends the
// wait without an attempt; a message wakes a waiter before its sleep ends.
func TestAcquireLoop(t *testing.T) {
	transient := &ReplyError{Err: errors.New("TRYAGAIN slot migrating")}
	final := &ReplyError{Err: errors.New("WRONGTYPE not a lock")}
	refuse := Turn{Sleep: time.Millisecond, After: -1}
	cases := []struct {
		name     string
		turns    []Turn
		errs     []error
		retryAll bool
		want     error // nil: acquired
		tries    int
		waited   bool
		listened int32
	}{
		{name: "at once", turns: []Turn{{OK: true}}, tries: 1},
		{name: "after two refusals", turns: []Turn{refuse, refuse, {OK: true}}, tries: 3, waited: true, listened: 2},
		{name: "a transient error retried", turns: []Turn{Retry, {OK: true}}, errs: []error{transient, nil}, tries: 2},
		{name: "a final error ends it", turns: []Turn{Retry}, errs: []error{final}, want: final, tries: 1},
		{name: "RetryAll retries a final error", turns: []Turn{Retry, {OK: true}}, errs: []error{final, nil}, retryAll: true, tries: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCore(t)
			var l listens
			w := Waiting{Key: "k", Verb: "obtaining", Retrying: "retrying", RetryAll: tc.retryAll, Idle: time.Second, Listener: &l}
			tries := 0
			waited, err := c.Acquire(context.Background(), &w, true, func(_ context.Context, first bool, _ int64) (Turn, error) {
				if first != (tries == 0) {
					t.Errorf("attempt %d: first %v", tries, first)
				}
				i := tries
				tries++
				var err error
				if i < len(tc.errs) {
					err = tc.errs[i]
				}
				return tc.turns[i], err
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) || tries != tc.tries || waited != tc.waited || l.n.Load() != tc.listened {
				t.Fatalf("err %v, %d tries, waited %v, %d listens; want %v, %d, %v, %d", err, tries, waited, l.n.Load(), tc.want, tc.tries, tc.waited, tc.listened)
			}
		})
	}

	t.Run("ctx ends the wait, wrapping the last error", func(t *testing.T) {
		c := newTestCore(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		w := Waiting{Key: "k", Verb: "obtaining", Retrying: "retrying", Idle: time.Second}
		_, err := c.Acquire(ctx, &w, true, func(context.Context, bool, int64) (Turn, error) { return Retry, transient })
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, transient) {
			t.Fatalf("err %v, want the deadline wrapping the last error", err)
		}
	})

	t.Run("a local hand-off during an attempt ends the wait", func(t *testing.T) {
		c := newTestCore(t)
		wk := NewWaker(true)
		var handed atomic.Bool
		w := Waiting{Key: "k", Verb: "acquiring", Retrying: "retrying", Idle: time.Hour, Wake: wk,
			Local: func(context.Context) (bool, error) { return handed.Load(), nil },
			Also:  handed.Load}
		tries := 0
		waited, err := c.Acquire(context.Background(), &w, true, func(context.Context, bool, int64) (Turn, error) {
			tries++
			handed.Store(true) // a holder of the registry hands over while the attempt is in flight
			wk.Poke()
			return Turn{Sleep: time.Hour, After: -1}, nil
		})
		if err != nil || tries != 1 || !waited {
			t.Fatalf("err %v, %d tries, waited %v; want the hand-off after one refused attempt", err, tries, waited)
		}
	})

	// mark is taken before each attempt: a message that comes while the
	// attempt is in flight is not missed, and the waiter sleeps through
	// the messages that are others' turns.
	for _, tc := range []struct {
		name     string
		messages int64
		slept    bool
	}{{"its turn's message wakes it", 2, false}, {"others' turns do not", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCore(t)
			wk := NewWaker(true)
			w := Waiting{Key: "k", Verb: "obtaining", Retrying: "retrying", Idle: time.Hour, Wake: wk}
			const sleep = 50 * time.Millisecond
			tries := 0
			start := time.Now()
			_, err := c.Acquire(context.Background(), &w, true, func(context.Context, bool, int64) (Turn, error) {
				tries++
				if tries > 1 {
					return Turn{OK: true}, nil
				}
				for range tc.messages {
					wk.Signal(1)
				}
				return Turn{Sleep: sleep, After: 2}, nil // its turn comes with the second message
			})
			if took := time.Since(start); err != nil || tries != 2 || (took >= sleep) != tc.slept {
				t.Fatalf("err %v, %d tries, after %v; want a sleep of %v: %v", err, tries, took, sleep, tc.slept)
			}
		})
	}
}

// countHandler counts the records logged at WARN.
type countHandler struct {
	slog.Handler
	warns   atomic.Int32
	retries atomic.Int64 // the sum of their "retries" attributes
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		h.warns.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "retries" {
				h.retries.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// A server that is down fails every attempt: the loop retries with
// backoff, and logs the first retry at once, then one warning a second
// at most, each counting the retries it stands for (it logged every one:
// 8 in the first 100 ms).
func TestAcquireLogsRetriesOnceASecond(t *testing.T) {
	c := newTestCore(t)
	h := &countHandler{}
	c.Log = slog.New(h)
	down := errors.New("connection refused")
	w := Waiting{Key: "k", Verb: "obtaining", Retrying: "retrying", RetryAll: true, Idle: time.Second}
	tries := 0
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, &w, true, func(context.Context, bool, int64) (Turn, error) {
		tries++
		return Retry, down
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, down) {
		t.Fatalf("Acquire = %v, want ctx's end wrapping the last error", err)
	}
	// Backoff from 10 ms doubles to 1 s: about 8 tries in 1.5 s.
	if w := h.warns.Load(); w < 1 || w > 2 || tries < 4 {
		t.Fatalf("%d warnings for %d failed attempts in 1.5 s, want 1 or 2", w, tries)
	}
	if got := h.retries.Load(); got > int64(tries) || got < int64(h.warns.Load()) {
		t.Fatalf("warnings count %d retries, of %d failed attempts", got, tries)
	}
}
