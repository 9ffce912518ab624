package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff after Redis errors: exponential from minBackoff, capped, with
// jitter, so that a fleet of waiters does not hammer a struggling server.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// Backoff is the delay schedule after consecutive errors. The zero value
// starts at minBackoff.
type Backoff struct{ next time.Duration }

// Delay returns the next Delay, jittered into [d/2, d], and doubles d.
func (b *Backoff) Delay() time.Duration {
	d := max(b.next, minBackoff)
	b.next = min(2*d, maxBackoff)
	return d/2 + rand.N(d/2+1)
}

func (b *Backoff) Reset() { b.next = 0 }

// PollDelay returns how long a waiter sleeps after losing a race to a holder
// whose key has pttl milliseconds left (-1: no expiry). Within idle it wakes
// just after the key expires (+1ms for Redis' millisecond rounding, plus up
// to 1ms of jitter), so it never sleeps past the holder's expiry by more than
// that; otherwise it sleeps idle shortened by up to a quarter at random, so
// that waiters of many processes spread out instead of polling in step.
func PollDelay(idle time.Duration, pttl int64) time.Duration {
	if pttl >= 0 {
		if left := time.Duration(pttl) * time.Millisecond; left < idle {
			return left + time.Millisecond + rand.N(time.Millisecond)
		}
	}
	return idle - rand.N(idle/4+1)
}

// CtxEnded returns ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed: a command cut by that deadline can fail a moment
// before ctx's own timer fires.
func CtxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// Await sleeps for d, or until release messages that w counts say that a
// waiter's turn may have come: after `after` of them since mark, the count
// before its last attempt (any one, when after < 0). A PubSubLock waiter
// behind others in the queue thus sleeps through the releases that are
// their turns, and the server runs one attempt per release, not one per
// waiter. A nil w (SpinLock) sleeps d. also, if not nil, ends the wait
// when it reports true after a wake-up (a semaphore's head: a permit was
// handed off).
func (c *Core) Await(ctx context.Context, w *Waker, d time.Duration, mark int64, after int, also func() bool) error {
	want := mark + max(int64(after), 1)
	if w.expect(want) || also != nil && also() {
		return nil
	}
	deadline := c.Now() + int64(d)
	for {
		left := time.Duration(deadline - c.Now())
		if left <= 0 {
			return nil
		}
		if err := c.BG.Sleep(ctx, left, w.notices()); err != nil {
			return err
		}
		if w.reached(want) || also != nil && also() {
			return nil
		}
	}
}

// WaitErr is the error of a wait for key ended by end (ctx.Err() or
// ErrClosed), wrapping the last Redis error seen, if any and if it is not
// end itself (a client that returns ctx.Err() as it is).
func WaitErr(key string, end, lastErr error) error {
	if lastErr == nil || lastErr == end {
		return WrapKey("waiting for", key, end)
	}
	return WrapKey("waiting for", key, fmt.Errorf("%w (last error: %w)", end, lastErr))
}
