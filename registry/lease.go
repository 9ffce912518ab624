package registry

import (
	"context"
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

// closedChan is returned by Lost when there is no hold to lose.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
