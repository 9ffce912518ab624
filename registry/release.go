package registry

import (
	"context"
)

// netTries bounds the attempts of a release or a renewal batch that fails
// on the network other than by a timeout. Each stale pooled connection (the
// server closed it: restart, CLIENT KILL) fails at once, and a pool may hold
// many.
const netTries = 10

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
// others reports that the release found other registries waiting for lk.
func (r *core) deleteToken(ctx context.Context, lk, token string) (done, others bool, first, err error) {
	done, first, err = r.retried(ctx, func(ctx context.Context) (bool, error) {
		var d bool
		d, others, err = r.mutex.release(ctx, lk, token)
		return d, err
	})
	return done, others, first, err
}

// retried runs op, an idempotent command on a key, as deleteToken runs the
// release: again after a stale connection or a transient error reply.
func (r *core) retried(ctx context.Context, op func(context.Context) (bool, error)) (done bool, first, err error) {
	var bo backoff
	for try := 1; ; try++ {
		done, err = op(ctx)
		switch {
		case try >= netTries || err == nil:
			return done, first, err
		case isStaleConn(err):
			if first == nil {
				first = err
			}
		case !isAmbiguous(err) && isTransient(err):
			if r.bg.sleep(ctx, bo.delay(), nil) != nil {
				return done, first, err
			}
		default:
			return done, first, err
		}
	}
}

// cleanup deletes, in the background and best effort, the lock key lk that
// this registry may have set with token without knowing it, so that it does not block
// others until its TTL runs out.
func (r *core) cleanup(lk, token string) {
	r.bg.spawn(func() {
		// bg.ctx: Close does not wait for a server that is down; the key
		// then expires by its TTL.
		_, _, _, _ = r.deleteToken(r.bg.ctx, lk, token)
	})
}
