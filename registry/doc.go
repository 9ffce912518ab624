// Package registry provides distributed locks on Redis, in the manner of
// Spring Integration's RedisLockRegistry and wire-compatible with it.
//
// # Model
//
// A Registry has a key prefix, the registryKey, and hands out one *RedisLock
// per key (Obtain), cached so that the goroutines of a process share it. A
// RedisLock pairs a local mutex with a key in Redis, registryKey + ":" + key:
//
//   - Locally, goroutines queue in FIFO order and ownership passes directly
//     to the next in line. Only the goroutine at the head of the queue talks
//     to Redis, so a process never sends more than one attempt at a time per
//     key, and no goroutine starves.
//   - In Redis, the key is set if it is absent, in one command, with a
//     millisecond TTL of expireAfter (never SETNX then EXPIRE) and a value
//     unique to the acquisition (the registry's random UUID and a counter):
//     a plain SET NX PX when the key is expected free and nothing else is
//     needed (no fencing, no WithReplicaAck; see SetNXClient), otherwise an
//     atomic Lua script. A waiter that finds the key taken learns its
//     remaining TTL and sleeps for the shorter of that and idleBetweenTries,
//     with jitter.
//   - Release is one compare-and-delete: it deletes the key only if it
//     still carries this acquisition's value, and publishes a message on
//     the Spring-compatible channel registryKey-channel:registryKey:key. It
//     is a script, or, where the server has them and no waiter is
//     expected, the server's native compare-and-delete (DELEX, DELIFEQ)
//     with the message, in one pipeline (see native.go).
//   - Local hand-off: when goroutines of the same lock instance queue on a
//     held lock, the outermost Unlock passes the Redis hold to the next of
//     them instead of deleting the key for it to set again. Up to 8 passes
//     in a row send no command, within 5ms of the last command (10ms for
//     a permit of a semaphore of several permits), while the hold has at
//     least three quarters of its TTL left (without fencing;
//     the next goroutine inherits the hold, its value and its validity);
//     then, and on every pass with fencing, one script resets the TTL (and
//     gives the next goroutine a new fencing token).
//   - Fair turns: a waiter whose attempt fails is queued in the key's wait
//     queue (a sorted set by the server time at which it began to wait, one
//     entry per lock instance, in the lock key's Cluster slot; see
//     lua/prelude.lua). When the key is freed (a release, a pass, or an
//     obtain that finds it expired) with waiters in line, it is kept for a
//     few milliseconds for the first of them that is sure to try soon: a
//     PubSubLock waiter, told by the release message, or a SpinLock waiter
//     whose next poll is due within 20ms (one due later is passed over, and
//     keeps its place). A pass that finds a waiter of another instance in
//     line releases the key for it, and queues its own goroutines behind
//     it. A PubSubLock waiter counts the release messages until its turn,
//     so a release makes one or two waiters try, not all of them. A TryLock
//     never queues. A run of local holds ends 24ms after the key was
//     obtained, whatever the queue says: the key is released and the release
//     published, and the next local goroutine waits about two round trips
//     (and at least a tenth of the run), so that clients that write no
//     queue entry (Spring's, an older lockyard) get the key too. A lease's ReleaseAfter tells the waiters
//     once its key has expired (for d up to a minute, if the registry is
//     still open; otherwise their next poll finds it free). A waiter whose
//     context ends, or whose registry is closed, leaves the queue; one
//     that vanished (a killed process) loses its turn when it does not
//     take it, and the key goes to the next waiter by that waiter's next
//     try at the latest. A lock instance evicted from the cache and kept
//     by its caller waits as a SpinLock waiter does (it hears no release
//     message).
//
// # Ownership and reentrancy
//
// A lock is held by a goroutine, as in Java, not by a process: the goroutine
// that locked must unlock. It may lock again (Lock, LockContext, TryLock);
// each acquisition needs its own unlock, and only the outermost pair talks to
// Redis, so an uncontended Lock+Unlock costs exactly two commands, nested
// ones cost none, and a hand-off between goroutines of one registry costs at
// most one. Unlock by a goroutine that does not hold the lock panics,
// as for sync.Mutex; UnlockContext returns ErrNotOwner instead.
//
// A Lease (Registry.Acquire, TryAcquire) is a hold that no goroutine owns:
// any goroutine may renew or release it. It is not reentrant; in the local
// queue of its key it is an owner of its own, so leases and the RedisLock of
// one key in one registry queue together in FIFO order, exclude each other,
// and pass the Redis hold between them. Package election builds leader
// election on leases.
//
// A Semaphore (Registry.Semaphore) admits at most N holders of a key at
// once across every registry: each Acquire returns a Lease that is one
// permit, with its own TTL and fencing token, expiring by the server's
// clock, so that a crashed holder's permit comes back after its TTL. An
// RWLock (Registry.RWLock) admits many readers or one writer.
// Registry.AcquireAll takes several lock keys at once, all or none, and
// returns one Lease that holds them all (Lease.Keys, Lease.Tokens).
//
// # TTL and validity
//
// Each hold has a TTL: expireAfter, or the ttl of LockFor, for that
// acquisition alone (a payment for 2s and a report for 20 minutes can share
// a registry and its local queue). A hold is valid from the moment the
// obtain request was sent until its TTL later, minus a small margin for
// clock drift (1% of the TTL plus 2ms). RenewLock extends it by its TTL,
// measured from the renewal's send time; RenewLockFor sets a new TTL from
// then on (and a shorter one shortens the validity at once); the watchdog
// renews each hold every third of its own TTL. A goroutine that takes a
// lock handed over locally gets the TTL it asked for. Once
// validity ends the hold is lost for good: the holder's work may overlap the
// next holder's. ExecuteLocked cancels fn's context with cause ErrLockLost at
// that moment, and UnlockContext reports ErrLockLost; the release never
// deletes a key that another holder has since taken. Every TTL is at least
// MinExpireAfter (50ms): a shorter one would be used up by the obtain's own
// round trip.
//
// A goroutine that never unlocks (it exited, or it is stuck) blocks the
// other goroutines of its registry no longer than its hold is valid: then
// the next goroutine queued on the lock, or a TryLock, takes it through
// Redis, as another registry could. The old holder's late UnlockContext
// returns ErrLockLost (Unlock logs it) and changes nothing; until then its
// Token is 0 and its Lost channel closed. With WithAutoRenew a hold stays
// valid while the process lives, so a goroutine that exits holding a lock
// blocks the key until Close or the end of the process: unlock with defer.
//
// # Concurrency
//
// Registry methods and RedisLock methods are safe for concurrent use. Lock
// and unlock calls must pair up on one goroutine. Close may be called at any
// time, more than once; it wakes every waiter with ErrClosed and stops the
// registry's background goroutines. A goroutine may still release a lock it
// holds after Close.
//
// # Errors
//
// Errors wrap the sentinels ErrLockLost, ErrNotOwner, ErrInvalidKey,
// ErrCacheFull, ErrClosed, ErrInvalidConfig, ErrReplicaAck, ErrNoQuorum,
// ErrNotObtained, ErrReleaseFailed, ErrWrongKind and ErrForeignKey
// (Inspect), and the Redis or context error behind them; test with
// errors.Is and errors.As. LockContext retries network and transient Redis
// errors until its context ends, then returns an error matching ctx.Err()
// that also wraps the last Redis error; other Redis errors (a key of
// another kind: ErrWrongKind; OOM, script errors) return at once. Lock has no error to
// return: it retries every failure with capped backoff, logging each one.
// Every Redis call is bounded by the command timeout (WithCommandTimeout)
// and by the context's deadline; a cancellation is seen between commands,
// so a command in flight completes (or times out) first. A release or a
// renewal that fails on the network (not by a timeout) is retried at once on
// another connection: after a restart or CLIENT KILL the pool holds
// connections the server has closed, and compare-and-delete and
// compare-and-renew are idempotent. A retried release that finds the key
// (or permit) gone while the hold is still valid takes it as given back by
// the first attempt, whose reply was lost, and reports no loss, unless the
// server lost the registry's keys meanwhile (its label is gone: a restart
// without persistence, a failover, FLUSHALL): then ErrLockLost.
//
// # Operations
//
// Before its first obtain a registry reads INFO memory once and logs a
// warning if the server's maxmemory-policy can evict lock keys (any policy
// but noeviction: lock keys carry a TTL), and publishes its label
// (WithLabel), which Inspect shows beside its holds and waits. The pub/sub subscriber PINGs its
// connection every second and reconnects after 3 seconds of silence, so a
// connection that died without a FIN is noticed. docs/RELIABILITY.md lists
// the faults the test suite injects and what lockyard did under each.
// Registry.Stats returns counters (acquisitions, contended waits, wait-time
// and hold-time histograms, gauges of holds and waits, outcomes, renewals,
// lost locks, Redis errors, cached locks) for a metrics system, and
// WithObserver tells an Observer of each wait, acquisition, release, loss
// and failed renewal (the module github.com/lockyard/lockyard/otel records
// them with OpenTelemetry). Registry.Inspect reads who holds a key and who
// waits, from any process. Lock keys are logged only in records about a
// failure of that lock, at warn or error level, never at info level.
//
// # Backends
//
// A registry talks to Redis through a Client: run a script (alone, followed
// by WAIT on the same connection, or pipelined in a batch) and
// pattern-subscribe; a Client that can also subscribe by channel
// (ChannelSubscriber, as NewPoolClient's and the go-redis and rueidis
// adapters' can)
// lets a registry hear only the releases of the keys its waiters wait for.
// New wraps a redigo pool in NewPoolClient; NewWithClient
// takes any Client, such as the go-redis adapter of the module
// github.com/lockyard/lockyard/goredis, which covers a single node, a
// Sentinel-managed master and Redis Cluster. In Cluster every script touches
// the keys of one slot, the lock key's, in both key forms (see WithHashTag).
// NewRedlock builds a registry on a
// majority of independent masters. Error replies of the server reach the
// registry as *ReplyError; everything else is treated as a network error,
// after which a script may or may not have run. docs/SCALING.md compares
// the setups.
//
// # What a single Redis master does not guarantee
//
// Redis replicates asynchronously: if the master fails over to a replica
// that had not yet received a lock key, a second holder can take the lock.
// And a holder paused for longer than its TTL (GC, swap, SIGSTOP) can go on
// working after its lock expired; it learns of the loss only afterwards.
// Where either would corrupt data, pass the fencing token (WithFencing,
// RedisLock.Token) to the storage you protect and have it reject stale
// tokens; lockyard's other safeguards only narrow these windows.
// WithReplicaAck narrows the first (an obtain waits until replicas have the
// key), and NewRedlock removes the single-failover case while a majority of
// its nodes keeps its data.
package registry
