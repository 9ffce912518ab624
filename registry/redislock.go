package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

var _ sync.Locker = (*RedisLock)(nil)

// Obtain returns the lock for key, the same *RedisLock for the same key while
// it stays cached. It does not contact Redis. It fails with ErrInvalidKey,
// ErrClosed, or ErrCacheFull when a new key does not fit because every
// cached lock is held or waited for.
func (r *Registry) Obtain(key string) (*RedisLock, error) {
	if r.core.BG.IsClosed() {
		return nil, ErrClosed
	}
	if err := checkLockKey(r.layout, key); err != nil {
		return nil, err
	}
	e, ok := r.cache.peek(key)
	if !ok {
		var err error
		if e, err = r.cache.getOrInsert(key, func() cached { return newRedisLock(&r.engine, r.mutex, key) }); err != nil {
			return nil, err
		}
	}
	l, ok := e.(*RedisLock)
	if !ok {
		return nil, fmt.Errorf("%w: %q is a %s in this registry", ErrInvalidKey, key, e.kind())
	}
	l.touch()
	return l, nil
}

// cachedLock returns the cached RedisLock for key, if key is one.
func (r *Registry) cachedLock(key string) (*RedisLock, bool) {
	e, ok := r.cache.peek(key)
	if !ok {
		return nil, false
	}
	l, ok := e.(*RedisLock)
	return l, ok
}

// RenewLock resets the time to live of the lock on key that this registry
// holds, whichever goroutine holds it, or whichever Lease (a lease is a
// hold of the registry, though not of the RedisLock: see RedisLock.Token). It returns ErrNotOwner if the registry
// holds no lock on key, and ErrLockLost (marking the hold lost) if the Redis
// key is gone or carries another token.
func (r *Registry) RenewLock(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	l, ok := r.cachedLock(key)
	if !ok {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, key)
	}
	return l.renew(ctx, 0)
}

// RenewLockFor is RenewLock that sets the hold's TTL to ttl, from now on:
// this renewal and the later ones, by hand or by the watchdog (Spring's
// renewLock(key, ttl)). A ttl below MinExpireAfter or above MaxDuration
// returns ErrInvalidConfig and sends nothing. A shorter ttl shortens the
// hold's validity at once.
func (r *Registry) RenewLockFor(ctx context.Context, key string, ttl time.Duration) error {
	if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	l, ok := r.cachedLock(key)
	if !ok {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, key)
	}
	return l.renew(ctx, ttl)
}

// Key returns the full Redis key of the lock: registryKey + ":" + key, or
// registryKey + ":{" + key + "}" with WithHashTag.
func (l *RedisLock) Key() string { return l.key }

// Token returns the fencing token of the current hold: strictly increasing
// per key across every holder, in every registry and process. It is 0 when
// no goroutine holds the lock (a Lease of the key is not a hold of the
// lock: see Lease.Token) or the registry was made without WithFencing. Any
// goroutine may read it, such as one that works for the holder. Pass it
// to the storage you protect, which should reject a token lower than the
// highest it has seen.
//
// The counter starts at the Redis server's clock in microseconds (TIME),
// and starts there again if Redis loses it (a restart without persistence,
// a failover to a replica that lacked it, FLUSHALL), so tokens stay
// increasing across such a loss as long as the server's clock does not go
// back and the key averages fewer than a million acquisitions a second. A
// failover to a replica whose copy of the counter lagged can repeat a token,
// as it can grant the lock twice (see WithReplicaAck).
func (l *RedisLock) Token() int64 {
	if h := l.goroutineHold(); h != nil {
		return h.Fence
	}
	return 0
}

// goroutineHold returns the current hold if a goroutine holds the lock, and
// the calling goroutine did not lose it to revoke; nil otherwise (a lease
// holds the key, or nobody).
func (l *RedisLock) goroutineHold() *core.Hold {
	h := l.hold.Load()
	if h == nil || l.local.Owner() <= 0 || l.revoked() {
		return nil
	}
	return h
}

// Lost returns a channel that is closed when the current hold is lost: its
// validity (the obtain's send time plus expireAfter, minus a drift margin,
// moved by each renewal) ended, or a renewal found the key gone; with
// WithAutoRenew also when Close stopped the renewals. It is the
// lost-lock signal for code that holds the lock through Lock/Unlock, as
// ExecuteLocked's context is for fn. A clean release does not close it. If
// the lock is not held, the channel is already closed. Safe to call from any
// goroutine; the first call for a hold arms one timer, stopped at release.
// While a Lease holds the key, the lock is not held: see Lease.Lost.
func (l *RedisLock) Lost() <-chan struct{} {
	h := l.goroutineHold()
	if h == nil {
		return closedChan
	}
	return h.Watch().Done()
}

// Lock blocks until the calling goroutine holds the lock. Redis errors do not
// make it fail: it logs them and retries with capped backoff (use
// LockContext to see them). It panics with an error wrapping ErrClosed if the
// registry is or gets closed.
func (l *RedisLock) Lock() {
	if err := l.lock(context.Background(), true, l.eng.cfg.expireAfter, reentrant.Self()); err != nil {
		panic(core.WrapKey("Lock", l.key, err))
	}
}

// LockContext blocks until the calling goroutine holds the lock or ctx ends.
// One deadline covers the local queue and the Redis attempts. It retries
// transient Redis errors until ctx ends, then returns an error matching
// ctx.Err() that also wraps the last Redis error; other Redis errors (such as
// WRONGTYPE) and ErrClosed return at once. On error nothing is held.
func (l *RedisLock) LockContext(ctx context.Context) error {
	return l.lock(ctx, false, l.eng.cfg.expireAfter, reentrant.Self())
}

// LockFor is LockContext for one acquisition whose key lives ttl in Redis
// instead of expireAfter. Its validity, its renewal period (ttl/3 with
// WithAutoRenew) and the renewals of RenewLock use ttl until the outermost
// release. Spring's lock(ttl) is LockFor(context.Background(), ttl);
// tryLock(wait, ttl) is LockFor with a ctx that ends after wait. A ttl
// below MinExpireAfter (and so below 1ms) or above MaxDuration returns
// ErrInvalidConfig and sends nothing. A reentrant LockFor sends nothing and
// leaves the outer hold's TTL as it is.
func (l *RedisLock) LockFor(ctx context.Context, ttl time.Duration) error {
	if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return err
	}
	return l.lock(ctx, false, ttl, reentrant.Self())
}

// TryLock makes one attempt, locally and in Redis, without waiting for
// another holder, and reports whether the calling goroutine holds the lock.
// A Redis error counts as not acquired and is logged. After Close it returns
// false.
func (l *RedisLock) TryLock() bool {
	res, err := l.tryLock(context.Background(), l.eng.cfg.expireAfter, reentrant.Self())
	if err != nil && res != tryClosed {
		l.eng.core.Log.Warn("lockyard: TryLock failed", "key", l.key, "err", err)
	}
	return res == tryHeld
}

// TryLockContext makes one attempt, like TryLock, and says why it failed:
// nil when the calling goroutine now holds the lock (reentrant as TryLock),
// an error matching ErrNotObtained when another holder has it (locally or
// in Redis), or the Redis or ctx error (ErrClosed after Close). Nothing is
// logged.
func (l *RedisLock) TryLockContext(ctx context.Context) error {
	if err := ctx.Err(); err != nil && !l.eng.core.BG.IsClosed() {
		return core.WrapKey("trying", l.key, err)
	}
	return l.tryErr(l.tryLock(ctx, l.eng.cfg.expireAfter, reentrant.Self()))
}

// Unlock releases one hold of the calling goroutine; the outermost one
// releases the key in Redis, even if the registry was closed. It panics,
// with an error that wraps ErrNotOwner, if the calling goroutine does not
// hold the lock (as sync.Mutex panics: a RedisLock belongs to the goroutine
// that locked it). A lost lock or a Redis error is logged (at error level)
// instead of returned: use UnlockContext to see it.
func (l *RedisLock) Unlock() {
	token := l.Token() // read before the release forgets the hold
	err := l.UnlockContext(context.Background())
	switch {
	case err == nil:
	case errors.Is(err, ErrNotOwner):
		panic(fmt.Errorf("%w: Unlock of %q by a goroutine that does not hold it", ErrNotOwner, l.key))
	case errors.Is(err, ErrLockLost):
		l.eng.core.Log.Error("lockyard: lock was lost before Unlock", "key", l.key, "token", token, "err", err)
	default:
		l.eng.core.Log.Error("lockyard: release failed; the key expires by its TTL", "key", l.key, "token", token, "err", err)
	}
}

// UnlockContext releases one hold of the calling goroutine. The outermost
// one runs the compare-and-delete release script in Redis, even if ctx is
// already done (it then uses its own bounded timeout), and frees the local
// mutex in every case. It returns ErrNotOwner if the calling goroutine does
// not hold the lock, ErrLockLost if the key expired or was taken before the
// release (the other holder's key is left untouched), or an error matching
// ErrReleaseFailed that wraps the Redis error; a Redis error after the
// hold's validity ended matches ErrLockLost too.
func (l *RedisLock) UnlockContext(ctx context.Context) error {
	return l.unlockAs(ctx, reentrant.Self())
}

// unlockAs releases one hold of who (UnlockContext).
func (l *RedisLock) unlockAs(ctx context.Context, who reentrant.Owner) error {
	last, err := l.leave(who)
	if err != nil || !last {
		return err
	}
	return l.unlock(ctx, who)
}

// leave releases one hold of who unless it is the last (reentrant.Leave),
// with the errors of UnlockContext.
func (l *RedisLock) leave(who reentrant.Owner) (last bool, err error) {
	last, err = l.local.Leave(who)
	switch {
	case errors.Is(err, reentrant.ErrRevoked):
		return false, fmt.Errorf("%w: %q was lost while held, and passed on to another owner", ErrLockLost, l.key)
	case err != nil:
		return false, fmt.Errorf("%w: %q", ErrNotOwner, l.key)
	}
	return last, nil
}

// ExecuteLocked runs fn while holding the lock on key, waiting for it as
// LockContext does. fn's context is cancelled, with cause ErrLockLost, when
// the lock is lost: its validity ends at the obtain's send time plus
// expireAfter (minus a drift margin) unless renewed. The lock is released
// when fn returns or panics. The result joins fn's error with the release's:
// after a loss it matches ErrLockLost and is never nil; if fn succeeded but
// the release failed in Redis it matches ErrReleaseFailed (fn's work is
// done; the key expires by its TTL).
func (r *Registry) ExecuteLocked(ctx context.Context, key string, fn func(ctx context.Context) error) (err error) {
	l, err := r.Obtain(key)
	if err != nil {
		return err
	}
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	h := l.hold.Load()
	fctx, cancel := context.WithCancelCause(ctx)
	wctx := h.Watch()
	stop := context.AfterFunc(wctx, func() { cancel(context.Cause(wctx)) })
	defer func() {
		stop()
		cancel(nil)
		lost := h.Lost(r.core.Now())
		uerr := l.UnlockContext(ctx)
		if lost {
			h.CountLost()
		}
		if lost && !errors.Is(uerr, ErrLockLost) {
			uerr = core.Join(uerr, fmt.Errorf("%w: validity of %q ended before release", ErrLockLost, key))
		}
		err = core.Join(err, uerr)
	}()
	return fn(fctx)
}
