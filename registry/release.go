package registry

import (
	"context"
	"fmt"
	"time"
)

// deleteToken runs the release script of lk for token until it gets an answer,
// and reports whether the key was token's and is deleted, the first network
// error after which the script may have run (nil if none), and the final
// error. Two kinds of failure are retried, up to netTries attempts in all:
//   - a network error other than a timeout (a pooled connection the server
//     closed, after a restart or CLIENT KILL), at once on another
//     connection; a timeout has used up the command's time;
//   - a transient error reply (MOVED, ASK or TRYAGAIN while a Cluster slot
//     migrates, LOADING, ...), after a short backoff: the script did not run.
//
// Compare-and-delete is idempotent and never deletes another holder's key.
//
// others reports that the release found other registries waiting for lk;
// quiet, that the caller expects none (mutexProto.release).
func (r *engine) deleteToken(ctx context.Context, lk, token string, quiet bool) (done, others bool, first, err error) {
	done, first, err = r.core.Retried(ctx, func(ctx context.Context) (bool, error) {
		var d bool
		d, others, err = r.mutex.release(ctx, lk, token, quiet)
		return d, err
	})
	return done, others, first, err
}

// releaseLater deletes, in the background and best effort, the lock key lk that
// this registry may have set with token without knowing it, so that it does not block
// others until its TTL runs out.
func (r *engine) releaseLater(lk, token string) {
	r.core.BG.Spawn(func() {
		// bg.ctx: Close does not wait for a server that is down; the key
		// then expires by its TTL.
		_, _, _, _ = r.deleteToken(r.core.BG.Ctx, lk, token, false)
	})
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

// releaseFailed counts a release of key that failed with err in Redis
// (Stats.ReleaseFailed), and returns its error.
func (r *engine) releaseFailed(key string, err error) error {
	r.core.Counters.ReleaseFailed.Add(1)
	return fmt.Errorf("%w: %q: %w", ErrReleaseFailed, key, err)
}
