package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
// as the script says (or with backoff after errors), and waking early when
// release messages say its turn may have come. The caller owns local.
// waited reports that the lock was not taken at the first attempt: another
// holder had it, or this lock instance let others go first.
func (l *RedisLock) acquire(ctx context.Context, retryAll bool, ttl time.Duration) (waited bool, err error) {
	r := l.reg
	var (
		bo      backoff
		lastErr error
		g       grant
		race    time.Duration // after a release that let anyone take the key: a short poll, doubling
	)
	waited = l.turn.yield || l.turn.waitUntil > 0
	if l.turn.yield {
		race = 2 * l.turn.grace
	}
	if err := l.yieldFirst(ctx); err != nil {
		return waited, l.waitErr(err, nil)
	}
	first := true
	if left := l.turn.waitUntil - r.now(); l.turn.waitUntil > 0 {
		// A pass released the key for another waiter's turn and queued
		// this instance: wait for its turn before trying.
		l.turn.waitUntil = 0
		if left > 0 {
			if err := l.await(ctx, time.Duration(left), l.turn.mark, l.turn.after); err != nil {
				return waited, l.waitErr(err, nil)
			}
		}
		first = false
	}
	for ; ; first = false {
		mark := l.wake.mark()
		g, err = l.attempt(ctx, ttl, first, true)
		if g.ok {
			return waited, nil
		}
		delay := g.sleep
		if delay < 0 {
			delay = pollDelay(r.cfg.idle, -1)
		}
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
			delay, g.after = bo.delay(), -1
		} else {
			waited = true // another holder has it, or another waiter's turn
			bo.reset()
			r.subscriber.listen(l.wake)
			if race > 0 {
				// Someone took the key this instance let go: most likely a
				// client that is told of no turn (Spring's), which may not
				// publish its release either, and may take the key again
				// at once: poll often, less and less.
				delay, race = min(delay, race), race*5/4
				if race >= r.cfg.idle {
					race = 0
				}
			}
		}
		if err := l.await(ctx, delay, mark, g.after); err != nil {
			return waited, l.waitErr(err, lastErr)
		}
	}
}

// await sleeps for d, or until release messages say that the waiter's turn
// may have come: after `after` of them since mark, the count before its
// last attempt (any one, when after < 0). A PubSubLock waiter behind others
// in the queue thus sleeps through the releases that are their turns, and
// the server runs one obtain per release, not one per waiter.
func (l *RedisLock) await(ctx context.Context, d time.Duration, mark int64, after int) error {
	r := l.reg
	want := mark + max(int64(after), 1)
	if l.wake.expect(want) {
		return nil
	}
	deadline := r.now() + int64(d)
	for {
		left := time.Duration(deadline - r.now())
		if left <= 0 {
			return nil
		}
		if err := r.bg.sleep(ctx, left, l.wake.notices()); err != nil {
			return err
		}
		if l.wake.reached(want) {
			return nil
		}
	}
}

// leaveQueue takes this lock instance out of the key's wait queue, in the
// background, when its last waiter gives up: it would otherwise be given
// turns until its entry lapses. If another goroutine of this instance
// queues for the key, it carries on waiting in its place. The caller owns
// local.
func (l *RedisLock) leaveQueue() {
	if !l.turn.queued || l.local.Waiters() > 0 {
		return
	}
	l.turn.queued, l.turn.waitUntil = false, 0
	r := l.reg
	leave := func(ctx context.Context) {
		if err := r.store.leave(ctx, l.key, l.waiter); err != nil {
			r.log.Debug("lockyard: leaving the wait queue failed; the entry lapses", "key", l.key, "err", err)
		}
	}
	// bg.ctx: Close does not wait for a server that is down; the entry
	// then lapses.
	if !r.bg.spawn(func() { leave(r.bg.ctx) }) {
		// Closed: the waiter that Close woke leaves on its way out, within
		// a short bound, so that no turn is given to it.
		ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.commandTimeout, closeLeave))
		defer cancel()
		leave(ctx)
	}
}

// closeLeave bounds the leave of a waiter woken by Close.
const closeLeave = 500 * time.Millisecond

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
	r.eviction.check(ctx, r.store, r.log)
	token := r.newToken()
	sent := r.now()
	g, err := r.store.obtain(ctx, l.key, token, ttl, l.hint(first && !l.turn.taken, waits))
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
		return unknown, err
	}
	if !g.ok {
		l.turn.rtt = time.Duration(r.now() - sent)
		return g, nil
	}
	deadline := validUntil(sent, ttl)
	if r.now() >= deadline { // the reply came too late to be of use
		r.cleanup(l.key, token)
		return grant{sleep: 0, after: -1}, nil
	}
	l.turn.passes, l.turn.since, l.turn.lastCmd = 0, sent, sent
	l.turn.span = 0
	if l.turn.freed > 0 { // the end of the last run of holds: how long did others keep the key?
		l.turn.span = min(time.Duration(sent-l.turn.freed)-l.turn.grace, maxChainSpan)
		l.turn.freed = 0
	}
	l.begin(newHold(&r.core, l.key, token, g.fence, ttl, deadline, (*queueHook)(l)))
	return g, nil
}

// hint describes an obtain or pass of this lock instance for the store. An
// instance that is not the cached one (evicted, and kept by its caller)
// hears no release message: the subscriber wakes the cached instance. It
// queues as a poller, so that no turn is given to it that it would not
// hear of.
func (l *RedisLock) hint(free, waits bool) hint {
	r := l.reg
	deaf := false
	if waits && l.wake != nil {
		cached, ok := r.cache.peek(l.name)
		deaf = !ok || cached != l
	}
	return hint{free: free, waits: waits, waiter: l.waiter, deaf: deaf, spread: rand.N(r.cfg.idle/4 + 1), rtt: l.turn.rtt}
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
	l.reg.watchdog.track(h)
	l.touch()
	if l.local.Waiters() > 0 {
		h.guard()
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
			if l.local.Waiters() == 0 { // they gave up meanwhile
				l.leaveQueue()
			}
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
	h.retire()
	done, others, firstHere, err := l.reg.deleteToken(context.WithoutCancel(ctx), l.key, h.token)
	if others {
		// Waiters are queued: the next acquisition starts with the obtain
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

// teardown ends the turn of who, which owns the local mutex, after its
// hold h ended with err: h is retired and forgotten (a loss found at
// release counted), and the local mutex is freed. It returns err.
func (l *RedisLock) teardown(h *hold, err error, who reentrant.Owner) error {
	h.retire()
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
