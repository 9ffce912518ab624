package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// Lease is one hold of a key in Redis that no goroutine owns: the goroutine
// that acquired it may hand it to others, and any goroutine may renew or
// release it (Go's sync.Mutex allows this; a RedisLock, like Java's
// ReentrantLock, does not). A lease is not reentrant: each Acquire is a new
// owner, which waits for every other.
//
// In the local mutex of its key a lease is an owner of its own, neither a
// goroutine nor shared with one: leases and the RedisLocks of one key in
// one registry queue together in FIFO order and exclude each other, and
// the hand-off passes the Redis hold between them as between goroutines.
// The goroutine that acquired a lease does not hold the RedisLock: its
// Lock waits until the lease is released, by any goroutine. A goroutine
// that holds the RedisLock of a key cannot acquire a lease of it (it would
// wait for itself): Acquire and TryAcquire return ErrNotObtained.
//
// With WithAutoRenew the watchdog renews leases as it renews locks. A
// lease that is dropped without Release holds its key as a goroutine that
// never unlocks would: until its validity ends (never, with WithAutoRenew,
// until Close) and another owner queues behind it.
//
// All methods are safe for concurrent use; Release may run while another
// goroutine calls Renew.
type Lease struct {
	of  leased          // what it holds: a lock, or a semaphore's permit
	who reentrant.Owner // the lease's owner in that kind's local mutex
	h   *core.Hold      // the lease's hold: the same from Acquire to Release
	// since is when a semaphore's lease was acquired, on the registry
	// clock (a lock's lease: RedisLock.since).
	since int64
	// done is set by the first Release; Renew reads it under h.renewing,
	// so that no Renew of the lease reaches Redis after Release began.
	done atomic.Bool
}

// leased is what a Lease holds: a RedisLock (its key) or a semaphore's
// permit. The Lease's own rules (one Release,
// Renew ordered with it) are kept by Lease; what the kind does locally and
// in Redis is the kind's.
type leased interface {
	// key returns the full Redis key.
	leaseKey() string
	// holds reports whether le still holds its part: not lost and
	// passed on to another owner.
	holds(le *Lease) bool
	// endLease ends le (Release), with Release's errors.
	endLease(ctx context.Context, le *Lease) error
	// endLeaseAfter ends le, leaving its part in Redis for d
	// (ReleaseAfter).
	endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error
}

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

// Key returns the full Redis key of the lease, as RedisLock.Key.
func (le *Lease) Key() string { return le.of.leaseKey() }

// Token returns the fencing token of the lease (WithFencing), as
// RedisLock.Token: 0 once the lease is released or was lost and passed on,
// or without WithFencing.
func (le *Lease) Token() int64 {
	if !le.current() {
		return 0
	}
	return le.h.Fence
}

// Lost returns a channel that is closed when the lease's hold is lost, as
// RedisLock.Lost: its validity ended, a renewal found the key gone, or
// Close stopped its renewals (WithAutoRenew). A clean Release does not
// close a channel already returned; after Release, Lost returns a closed
// channel.
func (le *Lease) Lost() <-chan struct{} {
	if !le.current() {
		return closedChan
	}
	return le.h.Watch().Done()
}

// current reports whether the lease still holds its lock: not released, and
// not lost and passed on.
func (le *Lease) current() bool {
	return !le.done.Load() && le.of.holds(le)
}

// Renew resets the key's time to live, as RenewLock does for a lock, and
// moves the lease's validity. ttl <= 0 renews to the lease's own TTL;
// otherwise ttl becomes its TTL from now on, as with RenewLockFor (checked
// as Acquire checks it). It returns ErrNotOwner once the lease is released
// (also when Release runs while this renewal waits or is in flight), and
// ErrLockLost, marking the lease lost, if its validity ended or the key is
// gone or carries another token.
func (le *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if ttl < 0 {
		ttl = 0
	} else if ttl > 0 {
		if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
			return err
		}
	}
	h := le.h
	h.Renewing.Lock()
	defer h.Renewing.Unlock()
	switch {
	case le.done.Load():
		return fmt.Errorf("%w: the lease of %q was released", ErrNotOwner, le.Key())
	case h.Released() || !le.of.holds(le):
		return fmt.Errorf("%w: the lease of %q was lost and passed on", ErrLockLost, le.Key())
	}
	return h.Renew(ctx, ttl)
}

// ReleaseAfter ends the lease now but leaves its key in Redis for d: one
// compare-and-PEXPIRE sets the key's TTL to d, and the local queue moves
// on; the next owner, here or in another registry, gets the key once it
// has expired. It is for work that must not run again for a while after it
// started (a scheduler's job on replicas whose clocks tick a few
// milliseconds apart). For d up to a minute, the registry tells the
// waiters when the key has expired, unless it is closed by then; others
// find it free at their next poll. d below a millisecond (Redis's unit)
// is Release; above MaxDuration it returns ErrInvalidConfig and releases
// nothing.
// Errors are those of Release, and a second call returns ErrNotOwner.
func (le *Lease) ReleaseAfter(ctx context.Context, d time.Duration) error {
	if d < time.Millisecond {
		return le.Release(ctx)
	}
	if err := checkDuration("d", d, time.Millisecond); err != nil {
		return err
	}
	if !le.begin() {
		return fmt.Errorf("%w: the lease of %q was already released", ErrNotOwner, le.Key())
	}
	return le.of.endLeaseAfter(ctx, le, d)
}

// Release ends the lease: it passes the hold to the next local owner
// queued on the key, or runs the compare-and-delete release script, as the
// outermost UnlockContext does, with the same errors (ErrLockLost,
// ErrReleaseFailed), even if ctx is done or the registry closed. Only the
// first call releases; a second Release returns ErrNotOwner. A renewal in
// flight (Renew, or the watchdog's batch) is waited for.
func (le *Lease) Release(ctx context.Context) error {
	if !le.begin() {
		return fmt.Errorf("%w: the lease of %q was already released", ErrNotOwner, le.Key())
	}
	return le.of.endLease(ctx, le)
}

// begin starts the one release of the lease, and reports whether this call
// is it. A Renew that holds renewing sends its TTL before the release does;
// one that takes it later sees done and sends nothing.
func (le *Lease) begin() bool {
	if !le.done.CompareAndSwap(false, true) {
		return false
	}
	le.h.Renewing.Lock()
	//lint:ignore SA2001 an intended barrier: wait for a Renew in flight
	le.h.Renewing.Unlock()
	return true
}

// expireAfter ends the hold of who without deleting its key, whose TTL becomes
// d (ReleaseAfter), and frees the local mutex: the next local owner
// obtains the key in Redis once it has expired.
func (l *RedisLock) expireAfter(ctx context.Context, d time.Duration, who reentrant.Owner) error {
	h := l.hold.Load()
	l.eng.obs.released(kindLock, l.key, h, l.since.Load())
	l.setPhase(releasing)
	// As for a pass: no renewal (the watchdog, RenewLock) may reach Redis
	// after this command and give the key its full TTL again.
	h.Retire()
	h.Renewing.Lock()
	defer h.Renewing.Unlock()
	ok, _, err := l.eng.core.Retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
		return h.Proto.Renew(ctx, l.key, h.Token, d)
	})
	if errors.Is(err, ErrReplicaAck) {
		ok, err = true, nil // it ran on the master: the key expires by d, or by its TTL
	}
	switch {
	case err != nil:
		// The key expires by its TTL, or by d if the command ran.
		err = errors.Join(l.eng.releaseFailed(l.key, err), h.LostAtRelease())
	case !ok:
		err = core.KeyGone(l.key)
	default:
		err = h.LostAtRelease()
		l.eng.nudgeAfter(d, func(ctx context.Context) (time.Duration, error) { return l.proto.nudge(ctx, l.key, h.Token) })
	}
	return l.teardown(h, err, who)
}
