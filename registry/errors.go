package registry

import "github.com/lockyard/lockyard/internal/core"

// Errors returned by the registry and its locks. Callers test for them with
// errors.Is; the returned errors wrap them with the key and the cause.
var (
	// ErrLockLost means the Redis key expired or was taken by another holder
	// before this holder released it, or its validity deadline passed.
	ErrLockLost = core.ErrLockLost
	// ErrNotOwner means the calling goroutine does not hold the lock (for
	// RenewLock: this registry does not hold it).
	ErrNotOwner = core.ErrNotOwner
	// ErrInvalidKey means the key is empty, longer than MaxKeyLen, or (for a
	// registry key) begins with '{', which is reserved for fence counters;
	// or that the registry uses the key for another kind (Obtain of a key
	// that is a Semaphore, or the reverse).
	ErrInvalidKey = core.ErrInvalidKey
	// ErrCacheFull means the lock cache is at capacity and every cached lock
	// is held or waited for.
	ErrCacheFull = core.ErrCacheFull
	// ErrClosed means the registry was closed.
	ErrClosed = core.ErrClosed
	// ErrInvalidConfig means a configuration that cannot work: New given
	// a nil pool or client, or an option with a value out of range; a
	// kind that the registry's backend cannot serve (a Semaphore on
	// Redlock); or, from a Semaphore's Acquire, a count of permits other
	// than the one its permits are held with.
	ErrInvalidConfig = core.ErrInvalidConfig
	// ErrReplicaAck means that, with WithReplicaAck, fewer replicas than
	// required acknowledged an obtained lock in time; the lock was released
	// again. LockContext retries it until its ctx ends. From RenewLock it
	// means the renewal was not acknowledged: the lock is still held, but
	// its validity did not move.
	ErrReplicaAck = core.ErrReplicaAck
	// ErrNotObtained means another holder has the lock: an attempt that did
	// not wait (TryLockContext) found it taken, locally or in Redis.
	ErrNotObtained = core.ErrNotObtained
	// ErrReleaseFailed means the release of a held lock failed in Redis (the
	// server was down, say): whatever the lock guarded has run, but its key
	// was not deleted and expires by its TTL. ExecuteLocked joins it to fn's
	// result, so a caller can tell a failed fn from a failed release.
	ErrReleaseFailed = core.ErrReleaseFailed
	// ErrNoQuorum means a Redlock registry could not reach a majority of its
	// nodes: too many were down, slow or failing. LockContext retries it
	// until its ctx ends.
	ErrNoQuorum = core.ErrNoQuorum
	// ErrWrongKind means the key is used as another kind in Redis: a lock
	// acquired on a semaphore's key (by another registry or process: in one
	// registry that is ErrInvalidKey, found without a command), a semaphore
	// on a lock's, or either on a key that holds some other value. The
	// message names both kinds. It is final: LockContext and Acquire return
	// it at once (Lock retries it, as every error, until the key changes).
	ErrWrongKind = core.ErrWrongKind
)
