package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// tryResult is the outcome of one attempt (tryLock).
type tryResult int

const (
	tryHeld       tryResult = iota // who holds the lock now
	tryClosed                      // the registry is closed
	tryLocalOwner                  // another owner of this registry has it
	tryRedisOwner                  // another holder has the key in Redis
	tryFailed                      // the obtain failed (the error says why)
)

// tryLock makes one attempt for who, locally and in Redis with a key that
// lives ttl, without waiting for another holder. The error is the failed
// obtain's (tryFailed), or ErrClosed.
func (l *RedisLock) tryLock(ctx context.Context, ttl time.Duration, who reentrant.Owner) (tryResult, error) {
	res, err := l.tryOnce(ctx, ttl, who)
	if res == tryLocalOwner || res == tryRedisOwner {
		l.eng.obs.notObtained()
	}
	return res, err
}

// tryOnce is tryLock's attempt.
func (l *RedisLock) tryOnce(ctx context.Context, ttl time.Duration, who reentrant.Owner) (tryResult, error) {
	if l.eng.core.BG.IsClosed() {
		return tryClosed, ErrClosed
	}
	ok, reentered, _ := l.local.TryLock(reentrant.Request{}, who) // exclusive: never too heavy
	if !ok && l.revokeLost() {
		ok, reentered, _ = l.local.TryLock(reentrant.Request{}, who)
	}
	switch {
	case !ok:
		return tryLocalOwner, nil
	case reentered:
		return tryHeld, nil
	}
	l.setPhase(acquiring)
	g, err := l.attempt(ctx, ttl, true, false)
	switch {
	case err != nil:
		l.unlockLocal(who)
		return tryFailed, err
	case !g.ok:
		l.unlockLocal(who)
		return tryRedisOwner, nil
	}
	l.eng.obs.acquired(kindLock, l.key, l.hold.Load(), false, -1)
	return tryHeld, nil
}

// tryErr is the error of an attempt of tryLock on l's key: nil when it is
// held, ErrNotObtained when another holder has it.
func (l *RedisLock) tryErr(res tryResult, err error) error {
	switch res {
	case tryLocalOwner:
		return fmt.Errorf("%w: %q is held by another owner in this registry", ErrNotObtained, l.key)
	case tryRedisOwner:
		return fmt.Errorf("%w: %q is held in Redis, or it is the turn of a registry that has waited longer", ErrNotObtained, l.key)
	case tryFailed:
		return core.WrapKey("obtaining", l.key, err)
	}
	return err
}
