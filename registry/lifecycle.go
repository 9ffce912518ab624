package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// A lock's lifecycle in one registry: lock and unlock, driven by the
// goroutine that owns the local mutex through the phases (lockstate.go);
// every path that ends a turn goes through teardown.

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

// release deletes h's key (engine.release): quietly (the server's native
// delete, or drop.lua: mutexProto.release) only if no waiter is expected
// (the acquisition found the key free: taken; no release found anyone
// queued within crowdMemory: crowd), else by release.lua, which gives
// the turn. passed is the network error of a pass that this release
// replaces, or nil.
func (l *RedisLock) release(ctx context.Context, h *core.Hold, passed error) error {
	l.setPhase(releasing)
	now := l.eng.core.Now()
	quiet := !l.turn.taken && l.turn.crowd.Quiet(now, l.eng.cfg.crowdMemory)
	return l.eng.release(ctx, l.key, h, passed, func(ctx context.Context) (bool, error) {
		done, others, err := l.proto.release(ctx, l.key, h.Token, quiet)
		if err == nil {
			// With waiters queued, the next acquisition starts with the
			// obtain script, which respects their turns (a plain SET
			// would not).
			l.turn.taken = l.turn.taken || others
			l.turn.crowd.Found(others, now)
		}
		return done, err
	}, l.gone)
}

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
