package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// Releases, written once for every kind: the kind brings its script (del);
// the engine retries it, tells what became of the hold, frees in the
// background what a lost reply may have left taken, and nudges the
// waiters after a ReleaseAfter.

// release gives h's key (or permit) back in Redis with del, retried, with a
// context that ignores the caller's cancellation but keeps the command
// timeout. Two kinds of failure are retried, up to the core's tries in all
// (core.Core.Retried):
//   - a network error other than a timeout (a pooled connection the server
//     closed, after a restart or CLIENT KILL), at once on another
//     connection; a timeout has used up the command's time;
//   - a transient error reply (MOVED, ASK or TRYAGAIN while a Cluster slot
//     migrates, LOADING, ...), after a short backoff: the script did not run.
//
// del must be safe to run again: a compare-and-delete never deletes
// another holder's key. h is retired first: a renewal that lands after the
// delete is not a loss. passed is the network error of a pass that this
// release replaces, after which the pass may have run, or nil. The error is
// core.Hold.ReleaseErr's: nil, a loss (failed, gone), or a failure.
func (r *engine) release(ctx context.Context, key string, h *core.Hold, passed error, del func(context.Context) (bool, error), gone func() error) error {
	h.Retire()
	ctx = context.WithoutCancel(ctx)
	done, first, err := r.core.Retried(ctx, del)
	failed := func(err error) error { return r.releaseFailed(key, err) }
	return h.ReleaseErr(ctx, done, cmp.Or(passed, first), err, failed, gone)
}

// releaseLater runs del, the kind's release of a key or permit that this
// registry may hold without knowing it (a reply was lost, or came too
// late), in the background and best effort, so that it does not block
// others until its TTL runs out; after Close, at once, within a short
// bound (soon).
func (r *engine) releaseLater(del func(context.Context) (bool, error)) {
	r.soon(func(ctx context.Context) { _, _, _ = r.core.Retried(ctx, del) })
}

// soon runs fn in the background with bg.ctx (Close does not wait for a
// server that is down), or, once the registry is closed, at once within a
// short bound: a waiter that Close woke leaves the wait queue on its way
// out, and a permit is given back rather than left taken for its TTL.
func (r *engine) soon(fn func(ctx context.Context)) {
	if !r.core.BG.Spawn(func() { fn(r.core.BG.Ctx) }) {
		ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.commandTimeout, closeLeave))
		defer cancel()
		fn(ctx)
	}
}

// leave takes waiter id out of the wait queue of lk in the background, by
// the kind's leave script (run), so that no turn is given to it: the same
// for every kind. The kind renewed its waiter id first (core.Waiter), so
// that the leave cannot take out the entry of a later wait. Once the
// registry is closed it runs at once: the waiter that Close woke leaves on
// its way out. A failure is logged: the entry lapses.
func (r *engine) leave(lk, id string, run func(ctx context.Context, lk, id string) error) {
	r.soon(func(ctx context.Context) {
		if err := run(ctx, lk, id); err != nil {
			r.core.Log.Debug("lockyard: leaving the wait queue failed; the entry lapses", "key", lk, "err", err)
		}
	})
}

// closeLeave bounds what soon does at once after Close.
const closeLeave = 500 * time.Millisecond

// releaseFailed counts a release of key that failed in Redis
// (Stats.ReleaseFailed), and returns its error.
func (r *engine) releaseFailed(key string, err error) error {
	r.core.Counters.ReleaseFailed.Add(1)
	return fmt.Errorf("%w: %q: %w", ErrReleaseFailed, key, err)
}

// expireAfter ends h without giving its key (or permit) back, for
// ReleaseAfter: one renewal by h's protocol sets it to expire d from now,
// and once it has, nudge (the kind's nudge script) tells the waiters in
// line, who would otherwise sleep until their poll: the expiry they were
// told of was the old one (nudgeAfter). As for a pass, h is retired first
// and a renewal in flight waited for, so that no renewal (the watchdog,
// RenewLock) reaches Redis after this one and gives the key its full TTL
// again. The error is the release's: nil, a loss, or a failure (the key
// then expires by its TTL, or by d if the renewal ran).
func (r *engine) expireAfter(ctx context.Context, key string, h *core.Hold, d time.Duration, nudge func(context.Context) (time.Duration, error)) error {
	h.Retire()
	h.Renewing.Lock()
	ok, _, err := r.core.Retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
		return h.Proto.Renew(ctx, key, h.Token, d)
	})
	h.Renewing.Unlock()
	if errors.Is(err, ErrReplicaAck) {
		ok, err = true, nil // it ran on the master: the key expires by d, or by its TTL
	}
	switch {
	case err != nil:
		return core.Join(r.releaseFailed(key, err), h.LostAtRelease())
	case !ok:
		return core.KeyGone(key)
	}
	r.nudgeAfter(d, nudge)
	return h.LostAtRelease()
}

// nudgeMargin is how long after its time to live a nudge checks that the
// key expired: the key's clock started about half a round trip before the
// registry's, and Redis counts whole milliseconds.
const nudgeMargin = 300 * time.Microsecond

// maxNudge bounds the ReleaseAfter whose expiry is announced: a waiter
// polls at least every idleBetweenTries anyway, which costs it little
// against a longer d, and a registry keeps no timer for long.
const maxNudge = time.Minute

// nudgeAfter tells the waiters of a key or permit that a ReleaseAfter left
// to expire in d, once it has expired, by the kind's nudge script: nothing
// else would, and they would sleep until their next poll. No goroutine
// waits meanwhile (a timer does); the nudge runs in the registry's
// background group, so Close stops it, and a timer that fires after Close
// does nothing. nudge says how long what it waits for has left, if it
// still lives (the clocks differ): the nudge is then tried again, at most
// three times in all. A d over maxNudge is not announced.
func (r *engine) nudgeAfter(d time.Duration, nudge func(context.Context) (left time.Duration, err error)) {
	if d <= maxNudge {
		r.nudgeIn(d, 3, nudge)
	}
}

func (r *engine) nudgeIn(d time.Duration, tries int, nudge func(context.Context) (time.Duration, error)) {
	time.AfterFunc(d+nudgeMargin, func() {
		r.core.BG.Spawn(func() {
			left, err := nudge(r.core.BG.Ctx)
			if err == nil && left >= 0 && tries > 1 {
				r.nudgeIn(left, tries-1, nudge)
			}
		})
	})
}
