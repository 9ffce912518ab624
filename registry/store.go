package registry

import (
	"context"
	"errors"
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
	// obtain takes lk for token if it is free (or already token's) and not
	// another waiter's turn.
	obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error)
	// pass keeps lk, held by token, for the next holder of this lock
	// instance, unless another waiter is in line for it, or force is set
	// (then it releases it).
	pass(ctx context.Context, lk, token string, ttl time.Duration, h hint, force bool) (passReply, error)
	// renew resets the TTL of lk if token holds it, and reports whether it
	// did.
	renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error)
	// renewBatch renews many holds together (the watchdog): one reply per
	// call, in order.
	renewBatch(ctx context.Context, calls []renewCall) []renewReply
	// release deletes lk and publishes the release if token holds it, and
	// reports whether it did, and whether waiters are queued for lk (as
	// far as the store can tell).
	release(ctx context.Context, lk, token string) (done, others bool, err error)
	// subscribe pattern-subscribes to every release channel of the registry.
	subscribe(ctx context.Context) (Subscription, error)
	// leave takes waiter out of lk's wait queue, when it stops waiting.
	leave(ctx context.Context, lk, waiter string) error
	// nudge tells waiters that lk, left to expire by token (ReleaseAfter),
	// is free, once it is; left is how long the key still lives, if it
	// does, or negative: it was free, or another holder's, and nothing is
	// left to do.
	nudge(ctx context.Context, lk, token string) (left time.Duration, err error)
	// info returns a section of the server's INFO, or errNoInfo.
	info(ctx context.Context, section string) (string, error)
}

// errNoInfo: the store cannot read INFO (a Client without an Info method,
// or Redlock).
var errNoInfo = errors.New("lockyard: the client cannot read INFO")

// hint is what the per-key path knows of an obtain or a pass.
type hint struct {
	// free: lk is expected free. A store may then try a cheaper command
	// first, and obtain as usual only if that fails.
	free bool
	// waits: the caller waits for the lock if this attempt fails (Lock,
	// Acquire), rather than giving up (TryLock, TryAcquire). Only a
	// waiting caller is queued.
	waits bool
	// waiter is the lock instance's id in the wait queue: registry id "/"
	// instance number.
	waiter string
	// deaf: the waiter hears no release message (a PubSubLock instance
	// that is no longer the cached one): it queues as a poller.
	deaf bool
	// spread is the jitter taken off a full poll interval when the
	// caller sleeps one (lua/prelude.lua, pause).
	spread time.Duration
	// rtt is the instance's last round trip to the server: a poller's next
	// try reaches it that long after its sleep.
	rtt time.Duration
}

// grant is the outcome of an obtain: acquired with a fencing token (0
// without fencing), or not, with how long the caller sleeps before it tries
// again by itself and after how many release messages its turn may have
// come (lua/obtain.lua).
type grant struct {
	ok    bool
	fence int64
	// sleep is how long to wait before the next try; negative when the
	// store does not say (pollDelay then decides).
	sleep time.Duration
	// after: the number of release messages after which the caller's turn
	// may have come; negative when unknown (every message may be it).
	after int
}

// unknown is a failed grant that says nothing about when to try again.
var unknown = grant{sleep: -1, after: -1}

// passOutcome says what a pass did.
type passOutcome int

const (
	passDeclined passOutcome = iota // the store does not pass (Redlock): release as usual
	passKept                        // the key is kept, renewed, for the next local holder
	passReleased                    // released for another waiter's turn; this instance is queued
	passFreed                       // released with nobody in line (force)
	passGone                        // the key was gone or another holder's: nothing changed
)

// passReply is the reply of a pass: fence is the next holder's fencing
// token when the key was kept; after passReleased, sleep and after are
// those of a failed obtain (grant), for the next local holder's wait.
type passReply struct {
	outcome passOutcome
	fence   int64
	sleep   time.Duration
	after   int
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
