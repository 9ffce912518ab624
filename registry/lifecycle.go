package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/reentrant"
)

// The lifecycle of a lock in one registry. The goroutine that owns the
// local mutex drives it through these phases:
//
//	idle        → acquiring    the head of the local queue obtains the key (lock, TryLock)
//	acquiring   → held         obtained (begin)
//	acquiring   → idle         failed: ctx ended, Close, a final Redis error (abandon)
//	held        → handingOver  the outermost Unlock finds goroutines queued locally
//	handingOver → held         the next goroutine inherits the hold (a free pass, or the pass kept the key)
//	handingOver → acquiring    the inherited hold had lost its validity: the next goroutine obtains anew
//	handingOver → releasing    no pass after all: the key is deleted
//	handingOver → idle         the pass released the key for another registry, or failed (teardown)
//	held        → releasing    the outermost Unlock, nobody queued (release)
//	releasing   → idle         teardown
//
// A hold (hold.go) is one acquisition in Redis; loss is a property of the
// hold, never of the lock. Every path that ends a turn goes through
// teardown, which retires the hold (no more renewals or loss reports),
// forgets it and frees the local mutex; release retires the hold before
// the delete, so that a renewal landing after it is not taken for a loss.
type phase int32

const (
	idle        phase = iota // not held, nobody acquiring
	acquiring                // the head of the local queue is obtaining the key
	held                     // a goroutine holds the lock
	handingOver              // the outermost Unlock passes the hold to the next local goroutine
	releasing                // the outermost Unlock deletes the key
)

var phaseNames = [...]string{"idle", "acquiring", "held", "handing over", "releasing"}

func (p phase) String() string { return phaseNames[p] }

func (l *RedisLock) setPhase(p phase) { l.phase.Store(int32(p)) }

// lock acquires the local mutex for who (the calling goroutine, or a
// lease), then the Redis key with a TTL of ttl. With retryAll every Redis
// error is retried (Lock); otherwise only transient ones.
func (l *RedisLock) lock(ctx context.Context, retryAll bool, ttl time.Duration, who reentrant.Owner) error {
	r := l.reg
	if r.bg.isClosed() {
		return ErrClosed
	}
	start := r.now()
	how, err := l.local.Lock(ctx, r.bg.closed, (*queueHook)(l), int64(ttl), who)
	switch {
	case errors.Is(err, reentrant.ErrAborted):
		return ErrClosed
	case err != nil:
		return wrapKey("waiting for", l.key, err)
	case how == reentrant.Reentered:
		return nil
	}
	if l.inherit(ctx, ttl) {
		r.stats.acquired(true, time.Duration(r.now()-start))
		return nil
	}
	if r.bg.isClosed() { // the wait was handed the mutex as Close aborted it
		l.abandon(who)
		return ErrClosed
	}
	l.setPhase(acquiring)
	waited, err := l.acquire(ctx, retryAll, ttl)
	if err != nil {
		l.leaveQueue()
		l.abandon(who)
		return err
	}
	r.stats.acquired(waited || how == reentrant.Queued, time.Duration(r.now()-start))
	return nil
}

// acquire runs the obtain script until it succeeds, sleeping between tries
// as pollDelay says, or with backoff after errors. The caller owns local.
// waited reports that the lock was not taken at the first attempt: another
// holder had it, or this goroutine yielded to another registry.
func (l *RedisLock) acquire(ctx context.Context, retryAll bool, ttl time.Duration) (waited bool, err error) {
	r := l.reg
	var (
		bo      backoff
		lastErr error
	)
	waited = l.turn.yield
	if err := l.yieldFirst(ctx); err != nil {
		return waited, l.waitErr(err, nil)
	}
	for first := true; ; first = false {
		l.wake.drain()
		g, err := l.attempt(ctx, ttl, first, true)
		if g.ok {
			return waited, nil
		}
		delay := pollDelay(r.cfg.idle, g.pttl)
		if err != nil {
			// When ctx has ended, an attempt cut short by it says less
			// than the error before it.
			if lastErr == nil || ctxEnded(ctx) == nil {
				lastErr = err
			}
			if end := ctxEnded(ctx); end != nil {
				return waited, l.waitErr(end, lastErr)
			}
			if !retryAll && !isTransient(err) {
				return waited, wrapKey("obtaining", l.key, err)
			}
			r.log.Warn("lockyard: obtain failed, retrying", "key", l.key, "err", err)
			delay = bo.delay()
		} else {
			waited = true // another holder has it
			bo.reset()
			r.subscriber.listen(l.wake)
		}
		if err := r.bg.sleep(ctx, delay, l.wake); err != nil {
			return waited, l.waitErr(err, lastErr)
		}
		if g.behind {
			// Another registry's turn comes first: let it take the lock
			// before trying (a try now would only be refused), for about
			// one round trip of its own and one of this waiter's.
			if err := r.bg.sleep(ctx, min(max(2*g.rtt, minBehind), maxBehind), nil); err != nil {
				return waited, l.waitErr(err, lastErr)
			}
		}
	}
}

// leaveQueue takes this registry out of the key's wait marker, in the
// background, when its last waiter gives up: a free key would otherwise
// stay reserved for its turn until the entry lapses. If another goroutine
// of this registry queues for the key, it carries on waiting in its place.
// The caller owns local.
func (l *RedisLock) leaveQueue() {
	if !l.turn.queued || l.local.Waiters() > 0 {
		return
	}
	l.turn.queued = false
	r := l.reg
	r.bg.spawn(func() {
		// bg.ctx: Close does not wait for a server that is down; the entry
		// then lapses.
		if err := r.store.leave(r.bg.ctx, l.key); err != nil {
			r.log.Debug("lockyard: leaving the wait queue failed; the entry lapses", "key", l.key, "err", err)
		}
	})
}

// waitErr is the error of a wait ended by end (ctx.Err() or ErrClosed),
// wrapping the last Redis error seen, if any and if it is not end itself
// (a client that returns ctx.Err() as it is).
func (l *RedisLock) waitErr(end, lastErr error) error {
	if lastErr == nil || lastErr == end {
		return wrapKey("waiting for", l.key, end)
	}
	return wrapKey("waiting for", l.key, fmt.Errorf("%w (last error: %w)", end, lastErr))
}

// attempt runs the store's obtain once, for a key that lives ttl. On
// success the new hold begins; on failure the grant carries the holder's
// remaining TTL. first says this is the acquisition's first attempt: the
// key is expected free unless the last acquisition found it taken. waits
// says the caller waits if it fails (see hint).
func (l *RedisLock) attempt(ctx context.Context, ttl time.Duration, first, waits bool) (grant, error) {
	r := l.reg
	r.checkEviction(ctx)
	token := r.newToken()
	sent := r.now()
	g, err := r.store.obtain(ctx, l.key, token, ttl, hint{free: first && !l.turn.taken, waits: waits})
	if err == nil {
		r.eviction.answered()
		if g.ok {
			l.turn.queued = false // obtain.lua took it out of the queue
			l.turn.taken = l.turn.taken && !first
		} else {
			l.turn.taken = true
			l.turn.queued = l.turn.queued || waits
		}
	}
	if err != nil {
		if isAmbiguous(err) && !errors.Is(err, ErrReplicaAck) {
			r.cleanup(l.key, token) // the script may have set the key before the reply was lost
		}
		return grant{pttl: -1}, err
	}
	if !g.ok {
		g.rtt = time.Duration(r.now() - sent)
		return g, nil
	}
	deadline := validUntil(sent, ttl)
	if r.now() >= deadline { // the reply came too late to be of use
		r.cleanup(l.key, token)
		return grant{pttl: 0}, nil
	}
	l.turn.passes = 0
	l.begin(newHold(token, g.fence, ttl, deadline))
	return g, nil
}

// begin makes h the lock's hold, held: the watchdog renews it from now on,
// and local waiters are guarded against its loss.
func (l *RedisLock) begin(h *hold) {
	l.install(h)
	l.setPhase(held)
}

// install makes h the lock's hold without changing the phase: a pass
// installs the next goroutine's hold while handing over, and the phase
// stays handingOver (not revocable) until that goroutine inherits it.
func (l *RedisLock) install(h *hold) {
	l.hold.Store(h)
	l.reg.watchdog.track(l, h)
	l.touch()
	if l.local.Waiters() > 0 {
		l.guard(h)
	}
}

// unlock ends the outermost hold of who, the owner of the local mutex: it
// hands the hold over to the next local owner, or releases the key.
func (l *RedisLock) unlock(ctx context.Context, who reentrant.Owner) error {
	h := l.hold.Load()
	if l.local.Waiters() > 0 {
		l.setPhase(handingOver)
		switch res, err := l.handOff(ctx, h, who); res {
		case handedOver:
			return nil
		case releasedForOthers:
			return l.teardown(h, l.lostAtRelease(h), who)
		case passFailed:
			return l.teardown(h, err, who)
		case releaseAfterPass:
			if !isAmbiguous(err) {
				err = nil // an error reply: the pass did not run
			}
			return l.teardown(h, l.release(ctx, h, err), who)
		}
		h = l.hold.Load() // a pass may have renewed it
	}
	return l.teardown(h, l.release(ctx, h, nil), who)
}

// release deletes h's key (see deleteToken) with a context that ignores the
// caller's cancellation but keeps the command timeout. h is retired first:
// a renewal that lands after the delete is not a loss. first is the network
// error of a pass that this release replaces, or nil.
func (l *RedisLock) release(ctx context.Context, h *hold, first error) error {
	l.setPhase(releasing)
	l.retire(h)
	done, others, firstHere, err := l.reg.deleteToken(context.WithoutCancel(ctx), l.key, h.token)
	if others {
		// Registries wait: the next acquisition starts with the obtain
		// script, which respects their turns (a plain SET would not).
		l.turn.taken = true
	}
	if first == nil {
		first = firstHere // the script may have run
	}
	switch {
	case err != nil:
		// A hold whose validity had ended is reported lost too.
		return errors.Join(l.releaseFailed(err), l.lostAtRelease(h))
	case !done && first != nil:
		return fmt.Errorf("%w: %q was gone at a retried release (the first attempt failed with %w and may have deleted it)", ErrLockLost, l.key, first)
	case !done:
		return errGone(l.key)
	}
	return l.lostAtRelease(h)
}

// releaseFailed is the error of a release that failed with err.
func (l *RedisLock) releaseFailed(err error) error {
	return fmt.Errorf("%w: %q: %w", ErrReleaseFailed, l.key, err)
}

// lostAtRelease returns ErrLockLost if h's validity ended before its key was
// deleted: another holder may have had it meanwhile.
func (l *RedisLock) lostAtRelease(h *hold) error {
	if h.lost(l.reg.now()) {
		return fmt.Errorf("%w: validity of %q ended before release", ErrLockLost, l.key)
	}
	return nil
}

// retire stops caring about h: the watchdog stops renewing it, and it
// reports no more loss. Safe to repeat.
func (l *RedisLock) retire(h *hold) {
	l.reg.watchdog.untrack(l, h)
	h.end()
}

// teardown ends the turn of who, which owns the local mutex, after its
// hold h ended with err: h is retired and forgotten (a loss counted), and
// the local mutex is freed. It returns err.
func (l *RedisLock) teardown(h *hold, err error, who reentrant.Owner) error {
	l.retire(h)
	if errors.Is(err, ErrLockLost) {
		l.reg.stats.lostHold(h)
	}
	l.hold.Store(nil)
	l.abandon(who)
	return err
}

// abandon frees the local mutex of who, holding nothing in Redis.
func (l *RedisLock) abandon(who reentrant.Owner) {
	l.setPhase(idle)
	l.touch()
	if err := l.local.Unlock(who); err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
}

// minBehind and maxBehind bound how long a waiter behind another
// registry's turn waits after a wake-up before it tries.
const (
	minBehind = 100 * time.Microsecond
	maxBehind = 5 * time.Millisecond
)
