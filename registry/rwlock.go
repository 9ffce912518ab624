package registry

import (
	"context"
	"fmt"
	"time"
)

// RWLock returns the read-write lock on key, cached like Obtain: the same
// *RWLock for the same key while it is cached. Its key is the lock key of
// the same name: a key is a lock, a semaphore or a read-write lock, not
// two of them. It returns ErrInvalidConfig on a Redlock registry or one
// made WithReplicaAck; ErrInvalidKey for a bad key or one that this
// registry uses as another kind; ErrClosed or ErrCacheFull as Obtain. It
// does not contact Redis.
func (r *Registry) RWLock(key string) (*RWLock, error) {
	switch {
	case r.core.BG.IsClosed():
		return nil, ErrClosed
	case r.rw == nil:
		return nil, fmt.Errorf("%w: a read-write lock needs one Redis master, not Redlock", ErrInvalidConfig)
	case r.cfg.ackReplicas > 0:
		return nil, fmt.Errorf("%w: a read-write lock does not wait for replicas (WithReplicaAck)", ErrInvalidConfig)
	}
	if err := checkLockKey(r.layout, key); err != nil {
		return nil, err
	}
	e, ok := r.cache.peek(key)
	if !ok {
		var err error
		if e, err = r.cache.getOrInsert(key, func() cached { return newRWLock(&r.engine, r.rw, key) }); err != nil {
			return nil, err
		}
	}
	l, ok := e.(*RWLock)
	if !ok {
		return nil, fmt.Errorf("%w: %q is a %s in this registry", ErrInvalidKey, key, e.kind())
	}
	l.touch()
	return l, nil
}

// Key returns the read-write lock's Redis key (as RedisLock.Key).
func (l *RWLock) Key() string { return l.key }

// AcquireRead waits for the read side, or until ctx ends, and returns it
// as a Lease, held beside other readers and no writer. ttl <= 0 means
// expireAfter; otherwise it is the hold's TTL, checked as for
// Registry.Acquire. A reader that joins its registry's read hold gets a
// Lease on that hold: it is valid while the hold is, which is at least
// two thirds of ttl from now (the hold is renewed to ttl when it has
// less). The Lease works as a lock's: Token (WithFencing), Lost, Renew,
// Release and ReleaseAfter, from any goroutine, and WithAutoRenew renews
// it. Renew of a lease on the shared hold renews that hold: a TTL shorter
// than the hold's shortens it for every lease on it (renew to the
// longest TTL the readers need, or use WithFencing, under which each read
// lease has a hold of its own). Transient Redis errors are retried until ctx ends; other errors
// (ErrWrongKind: the key is another kind's) return at once; on error
// nothing is held.
func (l *RWLock) AcquireRead(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return l.acquire(ctx, ttl, false, true)
}

// AcquireWrite waits for the write side, or until ctx ends: held alone,
// with no reader. Otherwise as AcquireRead.
func (l *RWLock) AcquireWrite(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return l.acquire(ctx, ttl, true, true)
}

// TryAcquireRead makes one attempt, locally and in Redis: ErrNotObtained
// when a writer holds the key, or waits for it, or the key is the turn of
// waiters in line. Other errors are those of AcquireRead.
func (l *RWLock) TryAcquireRead(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return l.acquire(ctx, ttl, false, false)
}

// TryAcquireWrite makes one attempt, locally and in Redis: ErrNotObtained
// when anyone holds the key, or it is the turn of waiters in line. Other
// errors are those of AcquireWrite.
func (l *RWLock) TryAcquireWrite(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return l.acquire(ctx, ttl, true, false)
}

// Downgrade turns the lease's write hold of a read-write lock into a read
// hold, in one step: no writer can take the key in between, and the
// readers at the front of the line (and this registry's, queued behind
// the lease) enter beside it; while a writer waits in line, this
// registry's readers that come later queue behind that writer. The lease
// keeps its token and TTL, and is released as a read lease. It returns
// ErrNotOwner for a lease that is released, or holds no write side of a
// read-write lock, and ErrLockLost if the hold was lost. A reply lost to a
// timeout is asked for again (the step is safe to repeat); if its outcome
// stays unknown, the lease is a read lease from then on, since it may be
// one in Redis with readers beside it, and the error says so: after any
// error the caller must not write.
func (le *Lease) Downgrade(ctx context.Context) error {
	p, ok := le.of.(*rwHold)
	if !ok {
		return fmt.Errorf("%w: the lease of %q is no read-write lock's", ErrNotOwner, le.Key())
	}
	return p.l.downgrade(ctx, p, le)
}
