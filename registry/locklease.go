package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// A lock's leases (Lease, lease.go): Registry.Acquire and TryAcquire, and
// what a lease of a RedisLock holds (leased): an owner of its own in the
// lock's local mutex.

// Acquire waits until this registry holds key in Redis, or ctx ends, and
// returns a Lease. ttl <= 0 means expireAfter; otherwise it is the key's
// TTL, as for LockFor (below MinExpireAfter or above MaxDuration:
// ErrInvalidConfig, sending nothing). A Lease is owned by no goroutine: any
// goroutine may renew or release it. It is not reentrant. Leases and
// RedisLocks of one key in one registry share the key's local FIFO queue
// and exclude each other. Errors are those of LockContext: transient Redis
// errors are retried until ctx ends; on error nothing is held.
func (r *Registry) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	l, ttl, err := r.leaseLock(key, ttl)
	if err != nil {
		return nil, err
	}
	who := reentrant.NewOwner()
	if err := l.lock(ctx, false, ttl, who); err != nil {
		return nil, err
	}
	return l.newLease(who)
}

// TryAcquire makes one attempt: ErrNotObtained if another holder has the
// key, locally or in Redis. Other errors are those of TryLockContext.
func (r *Registry) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	l, ttl, err := r.leaseLock(key, ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, core.WrapKey("trying", l.key, err)
	}
	who := reentrant.NewOwner()
	if err := l.tryErr(l.tryLock(ctx, ttl, who)); err != nil {
		return nil, err
	}
	return l.newLease(who)
}

// leaseLock checks ttl (0: expireAfter) and returns the lock of key for a
// lease, which the calling goroutine must not hold.
func (r *Registry) leaseLock(key string, ttl time.Duration) (*RedisLock, time.Duration, error) {
	if ttl <= 0 {
		ttl = r.cfg.expireAfter
	} else if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return nil, 0, err
	}
	l, err := r.Obtain(key)
	if err != nil {
		return nil, 0, err
	}
	if l.local.Depth(reentrant.Self()) > 0 {
		return nil, 0, fmt.Errorf("%w: the calling goroutine holds the RedisLock of %q; a lease of it would wait for that goroutine, that is for itself", ErrNotObtained, l.key)
	}
	return l, ttl, nil
}

// newLease returns the lease of who, which has just acquired l. The hold
// is read before who's ownership is checked: while who owns the local
// mutex the hold is its own. If it was revoked in between (its validity
// ended at once), the acquisition is lost.
func (l *RedisLock) newLease(who reentrant.Owner) (*Lease, error) {
	h := l.hold.Load()
	if h == nil || l.local.Depth(who) == 0 {
		_ = l.local.Unlock(who) // consumes the revoked hold
		return nil, fmt.Errorf("%w: %q was lost as it was acquired", ErrLockLost, l.key)
	}
	return &Lease{of: l, who: who, h: h}, nil
}

// The RedisLock as the kind of its leases.
func (l *RedisLock) leaseKey() string { return l.key }

func (l *RedisLock) holds(le *Lease) bool {
	return l.hold.Load() == le.h && !l.local.Revoked(le.who)
}

func (l *RedisLock) endLease(ctx context.Context, le *Lease) error { return l.unlockAs(ctx, le.who) }

func (l *RedisLock) endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error {
	last, err := l.leave(le.who)
	if err != nil || !last {
		return err
	}
	return l.expireAfter(ctx, d, le.who)
}

// expireAfter ends the hold of who without deleting its key, whose TTL becomes
// d (ReleaseAfter), and frees the local mutex: the next local owner
// obtains the key in Redis once it has expired.
func (l *RedisLock) expireAfter(ctx context.Context, d time.Duration, who reentrant.Owner) error {
	h := l.hold.Load()
	l.eng.obs.released(kindLock, l.key, h, l.since.Load())
	l.setPhase(releasing)
	err := l.eng.expireAfter(ctx, l.key, h, d, func(ctx context.Context) (time.Duration, error) {
		return l.proto.nudge(ctx, l.key, h.Token) // nudge.lua
	})
	return l.teardown(h, err, who)
}
