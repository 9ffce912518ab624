package registry

import (
	"context"
	"time"
)

// store is where a registry's locks live in Redis: the operations of the
// lock lifecycle, each atomic on the server. scriptStore runs the Lua
// scripts on one Client (scriptstore.go, with replica acknowledgement in
// replica.go); quorumStore runs them on a majority of independent masters
// (redlock.go). The per-key path calls its store and never asks which one
// it has. Every method bounds its Redis calls by the command timeout (and
// ctx's deadline, if nearer) and counts failed calls in Stats.
//
// lk is a lock key (wire.Layout.LockKey), token the value of one
// acquisition, ttl the key's time to live.
type store interface {
	// obtain takes lk for token if it is free (or already token's).
	obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error)
	// pass keeps lk, held by token, for the next holder of this registry,
	// unless another registry waits for it (then it releases it).
	pass(ctx context.Context, lk, token string, ttl time.Duration) (passReply, error)
	// renew resets the TTL of lk if token holds it, and reports whether it
	// did.
	renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error)
	// renewBatch renews many holds together (the watchdog): one reply per
	// call, in order.
	renewBatch(ctx context.Context, calls []renewCall) []renewReply
	// release deletes lk and publishes the release if token holds it, and
	// reports whether it did, and whether other registries wait for lk (as
	// far as the store can tell).
	release(ctx context.Context, lk, token string) (done, others bool, err error)
	// subscribe pattern-subscribes to every release channel of the registry.
	subscribe(ctx context.Context) (Subscription, error)
	// leave takes this registry out of lk's queue of waiting registries,
	// when it stops waiting.
	leave(ctx context.Context, lk string) error
	// info returns a section of the server's INFO, or errNoInfo.
	info(ctx context.Context, section string) (string, error)
}

// hint is what the per-key path knows of an obtain.
type hint struct {
	// free: lk is expected free. A store may then try a cheaper command
	// first, and obtain as usual only if that fails.
	free bool
	// waits: the caller waits for the lock if this attempt fails (Lock,
	// Acquire), rather than giving up (TryLock, TryAcquire). Only a
	// waiting PubSubLock registry gets its turn reserved (obtain.lua).
	waits bool
}

// grant is the outcome of an obtain: acquired with a fencing token (0
// without fencing), or not, with the holder's remaining TTL in ms (-1: no
// expiry, or unknown).
type grant struct {
	ok bool
	// behind: another registry, woken by the release message, is before
	// this one in the queue (obtain.lua): the next release is its turn.
	behind bool
	rtt    time.Duration // how long the failed obtain took
	fence  int64
	pttl   int64
}

// passOutcome says what a pass did.
type passOutcome int

const (
	passDeclined passOutcome = iota // the store does not pass (Redlock): release as usual
	passKept                        // the key is kept, renewed, for the next local holder
	passReleased                    // another registry waits: the key was released for it
	passGone                        // the key was gone or another holder's: nothing changed
)

// passReply is the reply of a pass; fence is the next holder's fencing
// token when the key was kept.
type passReply struct {
	outcome passOutcome
	fence   int64
}

// renewCall is one renewal of a batch.
type renewCall struct {
	lk, token string
	ttl       time.Duration
}

// renewReply is the outcome of one renewCall: ok when renewed, false when
// the key was gone or another holder's, or the error.
type renewReply struct {
	ok  bool
	err error
}

// bound returns ctx with a deadline at most timeout away. A nearer
// deadline of ctx is kept as it is, without a timer.
func bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}
