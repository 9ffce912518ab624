package core

import (
	"context"
	"time"
)

// The waiting loop of every lock kind, written once: a kind brings its
// attempt (a script in Redis, or a hold handed over locally), and the loop
// tries, sleeps as the attempt says, wakes on a message or a local
// hand-off, retries Redis errors with backoff, and gives up when ctx ends
// or the registry closes.

// Turn is what one attempt says: acquired, or when the waiter tries again.
type Turn struct {
	OK bool
	// Sleep is how long the waiter sleeps before it tries again by itself;
	// negative when the attempt does not say (a poll interval then).
	Sleep time.Duration
	// After is the number of wake-ups after which the waiter's turn may
	// have come; negative when any one may be it.
	After int
}

// Retry is the Turn of an attempt that says nothing of when to try again.
var Retry = Turn{Sleep: -1, After: -1}

// Waiting describes one waiter to the loop: the head of a lock instance's
// local queue, or of a semaphore's leases.
type Waiting struct {
	Key  string // the Redis key, for errors and logs
	Verb string // what a final Redis error says the waiter was doing: "obtaining", "acquiring"
	// Retrying is the warning logged for each Redis error retried.
	Retrying string
	// RetryAll retries every Redis error until ctx ends (RedisLock.Lock);
	// otherwise a final one (WRONGTYPE, NOPERM) ends the wait.
	RetryAll bool
	Idle     time.Duration // the poll interval
	Wake     *Waker        // counts the wake-ups: release or turn messages, local hand-offs
	// Listener, if set, is told after each refused attempt: from then on
	// the waiter is woken by messages.
	Listener Listener
	// Also, if set, ends a sleep when it reports true after a wake-up (a
	// semaphore's head: a permit was handed off).
	Also func() bool
	// Local, if set, runs before each attempt: it takes what a holder of
	// the same registry handed over (ok), and may wait for that by itself
	// (when nothing else can come); an error (ctx's, ErrClosed) ends the
	// wait.
	Local func(ctx context.Context) (ok bool, err error)
}

// Listener delivers the messages that wake a waiter to its waker (a
// registry's subscriber).
type Listener interface {
	Listen(w *Waker)
}

// Attempt is one try of a waiter: first says that no attempt of this wait
// came before it, mark is the waker's count before it (the count that
// Turn.After is counted from).
type Attempt func(ctx context.Context, first bool, mark int64) (Turn, error)

// RetryLogEvery bounds how often a waiting loop logs its retries: the
// first at once, then at most one warning per RetryLogEvery, with the count
// of retries it stands for.
const RetryLogEvery = time.Second

// Acquire runs try until it acquires (or w.Local does), and reports
// whether the waiter waited (an attempt was refused). It returns the error
// that ended the wait: ctx's or ErrClosed (wrapping the last Redis error
// seen), or a final Redis error.
func (c *Core) Acquire(ctx context.Context, w *Waiting, first bool, try Attempt) (waited bool, err error) {
	var (
		bo      Backoff
		lastErr error
		warned  int64 // when (Now) the last retry was logged; 0: none yet
		quiet   int   // the retries not logged since
	)
	for ; ; first = false {
		if w.Local != nil {
			switch ok, err := w.Local(ctx); {
			case err != nil:
				return waited, WaitErr(w.Key, err, lastErr)
			case ok:
				return waited, nil
			}
		}
		mark := w.Wake.Mark()
		t, err := try(ctx, first, mark)
		switch {
		case err == nil && t.OK:
			return waited, nil
		case err == nil:
			waited = true // another holder has it, or another waiter's turn
			bo.Reset()
			if w.Listener != nil {
				w.Listener.Listen(w.Wake)
			}
		default:
			end := CtxEnded(ctx)
			// When ctx has ended, an attempt cut short by it says less
			// than the error before it.
			if lastErr == nil || end == nil {
				lastErr = err
			}
			if end != nil {
				return waited, WaitErr(w.Key, end, lastErr)
			}
			if !w.RetryAll && !IsTransient(err) {
				return waited, WrapKey(w.Verb, w.Key, err)
			}
			// One warning a second at most, with the retries since the last.
			if now := c.Now(); warned == 0 || now-warned >= int64(RetryLogEvery) {
				c.Log.Warn(w.Retrying, "key", w.Key, "err", err, "retries", quiet+1)
				warned, quiet = max(now, 1), 0
			} else {
				quiet++
			}
			t = Turn{Sleep: bo.Delay(), After: -1}
		}
		delay := t.Sleep
		if delay < 0 {
			delay = PollDelay(w.Idle, -1)
		}
		if err := c.Await(ctx, w.Wake, delay, mark, t.After, w.Also); err != nil {
			return waited, WaitErr(w.Key, err, lastErr)
		}
	}
}
