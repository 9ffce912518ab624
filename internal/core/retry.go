package core

import (
	"context"
)

// netTries bounds the attempts of a release or a renewal batch that fails
// on the network other than by a timeout. Each stale pooled connection (the
// server closed it: restart, CLIENT KILL) fails at once, and a pool may hold
// many.
const netTries = 10

// Retried runs op, an idempotent command on a key, as deleteToken runs the
// release: again after a stale connection or a transient error reply.
func (r *Core) Retried(ctx context.Context, op func(context.Context) (bool, error)) (done bool, first, err error) {
	var bo Backoff
	for try := 1; ; try++ {
		done, err = op(ctx)
		switch {
		case try >= netTries || err == nil:
			return done, first, err
		case IsStaleConn(err):
			if first == nil {
				first = err
			}
		case !IsAmbiguous(err) && IsTransient(err):
			if r.BG.Sleep(ctx, bo.Delay(), nil) != nil {
				return done, first, err
			}
		default:
			return done, first, err
		}
	}
}
