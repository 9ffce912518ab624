package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Local hand-off. When the outermost Unlock finds goroutines of the same
// registry queued on the lock, the Redis key stays held and the hold passes
// to the head of the local queue, instead of a delete that the next
// goroutine follows with an obtain (two round trips, and a race that other
// registries win or lose at random).
//
//   - Free pass: no command at all, while the hold has at least three
//     quarters of expireAfter left and fewer than maxFreePasses were made
//     since the last command. Without fencing only: the next goroutine
//     inherits the hold, its token and its fencing token.
//   - Pass script (pass.lua): one round trip resets the TTL and, with
//     fencing, gives the next goroutine a new fencing token. If another
//     registry left a wait marker (obtain.lua writes one on every failed
//     attempt), the script releases the key instead, and the next local
//     goroutine yields: it waits before its first attempt (PubSubLock: twice
//     the pass's round trip plus 1ms; SpinLock: one poll interval), so that
//     the other registry's waiter, woken by the release, gets the lock.
//
// So a registry keeps a contended key for at most maxFreePasses+1 local
// holds while another registry waits, and the Redis key is touched by one
// command per maxFreePasses+1 local holds when nobody else waits.
const maxFreePasses = 8

// handoffState is the hand-off bookkeeping of one lock, owned by the
// goroutine that owns its local mutex.
type handoffState struct {
	passes int           // free passes since the last command on the key
	yield  bool          // the next acquisition waits before its first attempt
	grace  time.Duration // how long a PubSubLock waiter yields
	err    error         // why the last pass failed
}

type handoffResult int

const (
	notHandedOver     handoffResult = iota // release as usual
	handedOver                             // the next local goroutine holds the lock
	releasedForOthers                      // pass.lua released the key for another registry
	passFailed                             // pass.lua failed (handoffState.err); cleanup started
	releaseAfterPass                       // pass.lua failed on the network or transiently (handoffState.err): release instead
)

// handOff passes the hold h of the calling goroutine, whose outermost
// Unlock this is, to the next local waiter.
func (l *RedisLock) handOff(ctx context.Context, h *hold) handoffResult {
	r := l.reg
	now := r.now()
	if r.isClosed() || h.lost(now) {
		return notHandedOver
	}
	if !r.cfg.fencing && l.handoff.passes < maxFreePasses &&
		h.deadline.Load()-now >= int64(r.cfg.expireAfter*3/4) {
		l.handoff.passes++
		return l.giveLocal()
	}
	if r.cfg.redlock {
		return notHandedOver // a pass needs one node's view of the waiters
	}
	switch res, err := l.pass(ctx, h); {
	case errors.Is(err, ErrLockLost):
		l.handoff.err = err
		return passFailed
	case isStaleConn(err), !isAmbiguous(err) && isTransient(err):
		// Most likely a pooled connection that the server closed, or a
		// Cluster slot in migration (TRYAGAIN: the pass's keys are split
		// between two nodes): the caller releases instead (one key),
		// retrying.
		l.handoff.err = err
		return releaseAfterPass
	case err != nil:
		// The key may or may not still be ours: free it in the
		// background rather than wait for a second command now.
		l.handoff.err = fmt.Errorf("lockyard: releasing %q: %w", l.key, err)
		l.cleanup(h.token)
		return passFailed
	case res == releasedForOthers:
		l.handoff.yield = true
		return res
	case res == handedOver:
		return l.giveLocal()
	}
	return notHandedOver
}

// giveLocal hands the local mutex, with the current hold, to the head of
// the queue. If the waiters left meanwhile the caller still owns both.
func (l *RedisLock) giveLocal() handoffResult {
	ok, err := l.local.HandOff()
	if err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
	if !ok {
		return notHandedOver
	}
	return handedOver
}

// pass runs pass.lua for h. When the key is kept it replaces h with a hold
// renewed from the script's send time (and, with fencing, a new token).
func (l *RedisLock) pass(ctx context.Context, h *hold) (handoffResult, error) {
	r := l.reg
	ttl := r.cfg.expireAfter
	sent := r.now()
	// h ends here whatever the outcome: a renewal of h that lands after
	// the pass (which may delete the key) is not a loss.
	h.end()
	reply, err := redis.Values(r.eval(context.WithoutCancel(ctx), passScript, l.scriptKeys(), h.token, r.ttlArg, l.channel(), r.clientIDArg))
	if err != nil {
		return notHandedOver, err
	}
	var state, fence int64
	if _, err := redis.Scan(reply, &state, &fence); err != nil {
		return notHandedOver, fmt.Errorf("lockyard: unexpected pass reply %v: %w", reply, err)
	}
	rtt := time.Duration(r.now() - sent)
	l.handoff.grace = min(2*rtt+time.Millisecond, r.cfg.idle)
	switch state {
	case 1:
		nh := newHold(h.token, fence, sent+int64(ttl-drift(ttl)))
		l.forget(h)
		l.hold.Store(nh)
		r.track(l, nh)
		l.handoff.passes = 0
		return handedOver, nil
	case 2:
		return releasedForOthers, nil
	}
	return notHandedOver, fmt.Errorf("%w: %q expired or was taken by another holder", ErrLockLost, l.key)
}

// inherit takes over a hold handed over by the previous local holder, if
// any, and reports whether the calling goroutine now holds the lock. A hold
// that is no longer valid is dropped and its key freed in the background.
func (l *RedisLock) inherit() bool {
	h := l.hold.Load()
	if h == nil {
		return false
	}
	if !h.lost(l.reg.now()) {
		l.touch()
		return true
	}
	l.reg.stats.lostHold(h)
	l.forget(h)
	l.cleanup(h.token)
	return false
}

// yieldFirst makes the first acquisition after a release for another
// registry wait, so that the other registry's waiter gets the lock.
func (l *RedisLock) yieldFirst(ctx context.Context) error {
	if !l.handoff.yield {
		return nil
	}
	l.handoff.yield = false
	d := l.handoff.grace
	if l.wake == nil {
		d = pollDelay(l.reg.cfg.idle, -1)
	}
	return l.reg.sleep(ctx, d, nil)
}

// scriptKeys returns the keys of obtain.lua and pass.lua: the lock key,
// the wait marker and, with fencing, the fence counter.
func (l *RedisLock) scriptKeys() []string {
	if l.reg.cfg.fencing {
		return []string{l.key, l.waitKey(), l.fenceKey()}
	}
	return []string{l.key, l.waitKey()}
}
