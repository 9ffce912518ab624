package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// The lifecycle of a lock in one registry. The goroutine that owns the
// local mutex drives it through these phases:
//
//	idle        → acquiring    the head of the local queue obtains the key (lock, TryLock)
//	acquiring   → held         obtained (begin)
//	acquiring   → idle         failed: ctx ended, Close, a final Redis error (unlockLocal)
//	held        → handingOver  the outermost Unlock finds goroutines queued locally
//	handingOver → held         the next goroutine inherits the hold (a free pass, or the pass kept the key)
//	handingOver → acquiring    the inherited hold had lost its validity: the next goroutine obtains anew
//	handingOver → releasing    no pass after all: the key is deleted
//	handingOver → idle         the pass released the key for another registry, or failed (teardown)
//	held        → releasing    the outermost Unlock, nobody queued (release)
//	releasing   → idle         teardown
//
// A hold (core.Hold, internal/core/hold.go) is one acquisition in Redis; loss is a property of the
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
	r := l.eng
	if r.core.BG.IsClosed() {
		return ErrClosed
	}
	start := r.core.Now()
	r.obs.waiting(kindLock, l.key)
	err := l.lockAs(ctx, retryAll, ttl, who, start)
	r.obs.waited(err)
	return err
}

// lockAs is lock's wait, begun at start.
func (l *RedisLock) lockAs(ctx context.Context, retryAll bool, ttl time.Duration, who reentrant.Owner, start int64) error {
	r := l.eng
	how, err := l.local.Lock(ctx, r.core.BG.Closed, (*queueHook)(l), reentrant.Request{TTL: ttl}, who)
	switch {
	case errors.Is(err, reentrant.ErrAborted):
		return ErrClosed
	case err != nil:
		return core.WrapKey("waiting for", l.key, err)
	case how == reentrant.Reentered:
		return nil
	}
	if l.inherit(ctx, ttl) {
		l.since.Store(r.core.Now())
		r.obs.acquired(kindLock, l.key, l.hold.Load(), true, time.Duration(r.core.Now()-start))
		return nil
	}
	if r.core.BG.IsClosed() { // the wait was handed the mutex as Close aborted it
		l.unlockLocal(who)
		return ErrClosed
	}
	l.setPhase(acquiring)
	waited, err := l.acquire(ctx, retryAll, ttl)
	if err != nil {
		l.leaveQueue()
		l.unlockLocal(who)
		return err
	}
	r.obs.acquired(kindLock, l.key, l.hold.Load(), waited || how == reentrant.Queued, time.Duration(r.core.Now()-start))
	return nil
}

// begin makes h the lock's hold, held: the watchdog renews it from now on,
// and local waiters are guarded against its loss.
func (l *RedisLock) begin(h *core.Hold) {
	l.since.Store(l.eng.core.Now()) // before a revocation can read it
	l.hold.Store(h)
	l.setPhase(held) // before the guard: a loss it finds at once is revocable
	l.track(h)
}

// install makes h the lock's hold without changing the phase: a pass
// installs the next goroutine's hold while handing over, and the phase
// stays handingOver (not revocable) until that goroutine inherits it
// (inherit handles a loss found meanwhile).
func (l *RedisLock) install(h *core.Hold) {
	l.hold.Store(h)
	l.track(h)
}

// track hands h, the lock's hold, to the watchdog, and guards it if
// goroutines queue behind it.
func (l *RedisLock) track(h *core.Hold) {
	l.eng.core.Watchdog.Track(h)
	l.touch()
	if l.local.Waiters() > 0 {
		h.Guard()
	}
}

// unlock ends the outermost hold of who, the owner of the local mutex: it
// hands the hold over to the next local owner, or releases the key.
func (l *RedisLock) unlock(ctx context.Context, who reentrant.Owner) error {
	h := l.hold.Load()
	l.eng.obs.released(kindLock, l.key, h, l.since.Load())
	if l.local.Waiters() > 0 {
		l.setPhase(handingOver)
		switch res, err := l.handOff(ctx, h, who); res {
		case handedOver:
			return nil
		case releasedForOthers:
			if l.local.Waiters() == 0 { // they gave up meanwhile
				l.leaveQueue()
			}
			return l.teardown(h, h.LostAtRelease(), who)
		case passFailed:
			return l.teardown(h, err, who)
		case releaseAfterPass:
			if !core.IsAmbiguous(err) {
				err = nil // an error reply: the pass did not run
			}
			return l.teardown(h, l.release(ctx, h, err), who)
		}
		h = l.hold.Load() // a pass may have renewed it
	}
	return l.teardown(h, l.release(ctx, h, nil), who)
}

// release deletes h's key (engine.release): by the server's native delete
// only if no waiter is expected (the acquisition found the key free:
// taken; the last release found nobody queued: crowded), else by
// release.lua, which gives the turn (mutexProto.release). passed is the
// network error of a pass that this release replaces, or nil.
func (l *RedisLock) release(ctx context.Context, h *core.Hold, passed error) error {
	l.setPhase(releasing)
	quiet := !l.turn.taken && !l.turn.crowded
	return l.eng.release(ctx, l.key, h, passed, func(ctx context.Context) (bool, error) {
		done, others, err := l.proto.release(ctx, l.key, h.Token, quiet)
		if err == nil {
			// With waiters queued, the next acquisition starts with the
			// obtain script, which respects their turns (a plain SET
			// would not).
			l.turn.taken = l.turn.taken || others
			l.turn.crowded = others
		}
		return done, err
	}, l.gone)
}

// releaseLater frees, in the background, the key that this registry may
// hold with token without knowing it (engine.releaseLater), by release.lua,
// which gives the turn.
func (l *RedisLock) releaseLater(token string) {
	l.eng.releaseLater(func(ctx context.Context) (bool, error) {
		done, _, err := l.proto.release(ctx, l.key, token, false)
		return done, err
	})
}

// gone is the loss of a hold whose key was not its own at its release.
func (l *RedisLock) gone() error { return core.KeyGone(l.key) }

// teardown ends the turn of who, which owns the local mutex, after its
// hold h ended with err: h is retired and forgotten (a loss found at
// release counted), and the local mutex is freed. It returns err.
func (l *RedisLock) teardown(h *core.Hold, err error, who reentrant.Owner) error {
	h.End(err)
	l.hold.Store(nil)
	l.unlockLocal(who)
	return err
}

// unlockLocal frees the local mutex of who, holding nothing in Redis.
func (l *RedisLock) unlockLocal(who reentrant.Owner) {
	l.setPhase(idle)
	l.touch()
	if err := l.local.Unlock(who); err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
}
