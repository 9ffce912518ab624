package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/reentrant"
)

var _ sync.Locker = (*RedisLock)(nil)

// RedisLock is a distributed lock on one key, obtained from a Registry. It
// pairs a local reentrant mutex owned by a goroutine with a key in Redis:
// goroutines of one registry queue locally in FIFO order, and only the head
// of the queue talks to Redis. The holding goroutine may lock again; each
// Lock needs an Unlock by the same goroutine, and only the outermost one
// releases the key in Redis.
type RedisLock struct {
	reg *Registry
	// key is the full Redis key, registryKey + ":" + key; the wait marker,
	// fence counter and release channel are derived from it when needed
	// (a cached lock stays small).
	key   string
	local reentrant.Mutex
	// hold is the current acquisition in Redis, nil when not held. Only the
	// goroutine that owns local stores it; anyone may load it.
	hold     atomic.Pointer[hold]
	lastUsed atomic.Int64 // registry clock of the last Obtain, lock or unlock
	// wake carries release notices to the remote waiter (PubSubLock only;
	// nil otherwise). Buffered: a notice sent before the wait is kept.
	wake chan struct{}
	// handoff is the local hand-off state, owned by the goroutine that owns
	// local (the mutex's hand-over orders the accesses).
	handoff handoffState
}

func newRedisLock(r *Registry, key string) *RedisLock {
	l := &RedisLock{reg: r, key: r.lockKey(key)}
	if r.cfg.lockType == PubSubLock {
		l.wake = make(chan struct{}, 1)
	}
	l.touch()
	return l
}

// Key returns the full Redis key of the lock: registryKey + ":" + key, or
// registryKey + ":{" + key + "}" with WithHashTag.
func (l *RedisLock) Key() string { return l.key }

// channel returns the lock's release channel.
func (l *RedisLock) channel() string { return channelName(l.reg.prefix, l.key) }

// userKey returns the key the lock was obtained with.
func (l *RedisLock) userKey() string { return l.reg.userKeyOf(l.key[len(l.reg.prefix)+1:]) }

// Token returns the fencing token of the current hold: strictly increasing
// per key across every holder, in every registry and process. It is 0 when
// the lock is not held or the registry was made without WithFencing. Pass it
// to the storage you protect, which should reject a token lower than the
// highest it has seen.
func (l *RedisLock) Token() int64 {
	if h := l.hold.Load(); h != nil {
		return h.fence
	}
	return 0
}

// closedChan is returned by Lost when there is no hold to lose.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Lost returns a channel that is closed when the current hold is lost: its
// validity (the obtain's send time plus expireAfter, minus a drift margin,
// moved by each renewal) ended, or a renewal found the key gone. It is the
// lost-lock signal for code that holds the lock through Lock/Unlock, as
// ExecuteLocked's context is for fn. A clean release does not close it. If
// the lock is not held, the channel is already closed. Safe to call from any
// goroutine; the first call for a hold arms one timer, stopped at release.
func (l *RedisLock) Lost() <-chan struct{} {
	h := l.hold.Load()
	if h == nil {
		return closedChan
	}
	return h.watch(l.reg).Done()
}

func (l *RedisLock) touch() { l.lastUsed.Store(l.reg.now()) }

// Lock blocks until the calling goroutine holds the lock. Redis errors do not
// make it fail: it logs them and retries with capped backoff (use
// LockContext to see them). It panics with an error wrapping ErrClosed if the
// registry is or gets closed.
func (l *RedisLock) Lock() {
	if err := l.lock(context.Background(), true); err != nil {
		panic(fmt.Errorf("lockyard: Lock(%q): %w", l.key, err))
	}
}

// LockContext blocks until the calling goroutine holds the lock or ctx ends.
// One deadline covers the local queue and the Redis attempts. It retries
// transient Redis errors until ctx ends, then returns an error matching
// ctx.Err() that also wraps the last Redis error; other Redis errors (such as
// WRONGTYPE) and ErrClosed return at once. On error nothing is held.
func (l *RedisLock) LockContext(ctx context.Context) error {
	return l.lock(ctx, false)
}

// TryLock makes one attempt, locally and in Redis, without waiting for
// another holder, and reports whether the calling goroutine holds the lock.
// A Redis error counts as not acquired and is logged. After Close it returns
// false.
func (l *RedisLock) TryLock() bool {
	if l.reg.isClosed() {
		return false
	}
	ok, reentered := l.local.TryLock()
	if !ok || reentered {
		return ok
	}
	acquired, _, err := l.obtain(context.Background())
	if err != nil {
		l.reg.log.Warn("lockyard: TryLock failed", "key", l.key, "err", err)
	}
	if !acquired {
		l.mustUnlockLocal()
		return false
	}
	l.reg.stats.acquired(false, -1)
	l.touch()
	return true
}

// Unlock releases one hold of the calling goroutine; the outermost one
// releases the key in Redis, even if the registry was closed. It panics if
// the calling goroutine does not hold the lock. A lost lock or a Redis error
// is logged (at error level) instead of returned: use UnlockContext to see it.
func (l *RedisLock) Unlock() {
	token := l.Token() // read before the release forgets the hold
	err := l.UnlockContext(context.Background())
	switch {
	case err == nil:
	case errors.Is(err, ErrNotOwner):
		panic(fmt.Sprintf("lockyard: Unlock of %q by a goroutine that does not hold it", l.key))
	case errors.Is(err, ErrLockLost):
		l.reg.log.Error("lockyard: lock was lost before Unlock", "key", l.key, "token", token, "err", err)
	default:
		l.reg.log.Error("lockyard: release failed; the key expires by its TTL", "key", l.key, "token", token, "err", err)
	}
}

// UnlockContext releases one hold of the calling goroutine. The outermost
// one runs the compare-and-delete release script in Redis, even if ctx is
// already done (it then uses its own bounded timeout), and frees the local
// mutex in every case. It returns ErrNotOwner if the calling goroutine does
// not hold the lock, ErrLockLost if the key expired or was taken before the
// release (the other holder's key is left untouched), or the Redis error;
// a Redis error after the hold's validity ended matches ErrLockLost too.
func (l *RedisLock) UnlockContext(ctx context.Context) error {
	last, err := l.local.Leave()
	if err != nil {
		return fmt.Errorf("%w: %q", ErrNotOwner, l.key)
	}
	if !last {
		return nil
	}
	h := l.hold.Load()
	if l.local.Waiters() > 0 {
		switch l.handOff(ctx, h) {
		case handedOver:
			return nil
		case releasedForOthers:
			return l.finish(h, l.lostAtRelease(h))
		case passFailed:
			err, l.handoff.err = l.handoff.err, nil
			return l.finish(h, err)
		case releaseAfterPass:
			err, l.handoff.err = l.handoff.err, nil
			if !isAmbiguous(err) {
				err = nil // an error reply: the pass did not run
			}
			l.reg.untrack(l, h)
			return l.finish(h, l.release(ctx, h, err))
		}
		h = l.hold.Load() // a pass may have renewed it
	}
	l.reg.untrack(l, h)
	h.end() // a renewal that lands after the release is not a loss
	return l.finish(h, l.release(ctx, h, nil))
}

// finish ends h after its release, frees the local mutex and returns err.
func (l *RedisLock) finish(h *hold, err error) error {
	if errors.Is(err, ErrLockLost) {
		l.reg.stats.lostHold(h)
	}
	l.forget(h)
	l.touch()
	l.mustUnlockLocal()
	return err
}

// forget ends h: the watchdog stops renewing it and it reports no more loss.
func (l *RedisLock) forget(h *hold) {
	l.reg.untrack(l, h)
	h.end()
	l.hold.Store(nil)
}

// lock acquires the local mutex, then the Redis key. With retryAll every
// Redis error is retried (Lock); otherwise only transient ones.
func (l *RedisLock) lock(ctx context.Context, retryAll bool) error {
	r := l.reg
	if r.isClosed() {
		return ErrClosed
	}
	start := r.now()
	how, err := l.local.Lock(ctx, r.closed)
	switch {
	case errors.Is(err, reentrant.ErrAborted):
		return ErrClosed
	case err != nil:
		return fmt.Errorf("lockyard: waiting for %q: %w", l.key, err)
	case how == reentrant.Reentered:
		return nil
	}
	if l.inherit() {
		r.stats.acquired(true, time.Duration(r.now()-start))
		return nil
	}
	if r.isClosed() { // the wait was handed the mutex as Close aborted it
		l.mustUnlockLocal()
		return ErrClosed
	}
	waited, err := l.acquire(ctx, retryAll)
	if err != nil {
		l.mustUnlockLocal()
		l.touch()
		return err
	}
	r.stats.acquired(waited || how == reentrant.Queued, time.Duration(r.now()-start))
	l.touch()
	return nil
}

// acquire runs the obtain script until it succeeds, sleeping between tries
// as pollDelay says, or with backoff after errors. The caller owns local.
// waited reports that the lock was not taken at the first attempt: another
// holder had it, or this goroutine yielded to another registry.
func (l *RedisLock) acquire(ctx context.Context, retryAll bool) (waited bool, err error) {
	r := l.reg
	var (
		bo      backoff
		lastErr error
	)
	waited = l.handoff.yield
	if err := l.yieldFirst(ctx); err != nil {
		return waited, l.waitErr(err, nil)
	}
	for {
		l.prepareWait()
		ok, pttl, err := l.obtain(ctx)
		if ok {
			return waited, nil
		}
		delay := pollDelay(r.cfg.idle, pttl)
		if err != nil {
			// When ctx has ended, an attempt cut short by it says less
			// than the error before it.
			if lastErr == nil || ctxEnded(ctx) == nil {
				lastErr = err
			}
			if end := ctxEnded(ctx); end != nil {
				return waited, l.waitErr(end, lastErr)
			}
			if !retryAll && !isTransient(err) {
				return waited, fmt.Errorf("lockyard: obtaining %q: %w", l.key, err)
			}
			r.log.Warn("lockyard: obtain failed, retrying", "key", l.key, "err", err)
			delay = bo.delay()
		} else {
			waited = true // another holder has it
			bo.reset()
			l.listen()
		}
		if err := r.sleep(ctx, delay, l.wake); err != nil {
			return waited, l.waitErr(err, lastErr)
		}
	}
}

// waitErr is the error of a wait ended by end (ctx.Err() or ErrClosed),
// wrapping the last Redis error seen, if any.
func (l *RedisLock) waitErr(end, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("lockyard: waiting for %q: %w", l.key, end)
	}
	return fmt.Errorf("lockyard: waiting for %q: %w (last error: %w)", l.key, end, lastErr)
}

// obtain runs the obtain script once. On success it stores the new hold. On
// failure it returns the holder's remaining TTL in ms (-1: none, or
// unknown after an error).
func (l *RedisLock) obtain(ctx context.Context) (ok bool, pttl int64, err error) {
	r := l.reg
	r.checkEviction(ctx)
	token := newToken(r.clientID, r.seq.Add(1))
	ttl := r.cfg.expireAfter
	sent := r.now()
	reply, err := redis.Values(l.runObtain(ctx, token))
	if err != nil {
		if isAmbiguous(err) && !errors.Is(err, ErrReplicaAck) {
			l.cleanup(token) // the script may have set the key before the reply was lost
		}
		return false, -1, err
	}
	var acquired, n int64
	if _, err := redis.Scan(reply, &acquired, &n); err != nil {
		return false, -1, fmt.Errorf("lockyard: unexpected obtain reply %v: %w", reply, err)
	}
	if acquired == 0 {
		return false, n, nil
	}
	deadline := sent + int64(ttl-drift(ttl))
	if r.now() >= deadline { // the reply came too late to be of use
		l.cleanup(token)
		return false, 0, nil
	}
	h := newHold(token, n, deadline)
	l.hold.Store(h)
	l.handoff.passes = 0
	r.track(l, h)
	return true, 0, nil
}

// cleanup deletes, in the background and best effort, a key this registry
// may have set with token without knowing it, so that it does not block
// others until its TTL runs out.
func (l *RedisLock) cleanup(token string) {
	l.reg.spawn(func() {
		// bgCtx: Close does not wait for a server that is down; the key
		// then expires by its TTL.
		_, _, _ = l.deleteToken(l.reg.bgCtx, token)
	})
}

// netTries bounds the attempts of a release or a renewal batch that fails
// on the network other than by a timeout. Each stale pooled connection (the
// server closed it: restart, CLIENT KILL) fails at once, and a pool may hold
// many.
const netTries = 10

// deleteToken runs the release script for token until it gets an answer,
// and returns the script's reply, the first network error after which the
// script may have run (nil if none), and the final error. Two kinds of
// failure are retried, up to netTries attempts in all:
//   - a network error other than a timeout (a pooled connection the server
//     closed, after a restart or CLIENT KILL), at once on another
//     connection; a timeout has used up the command's time;
//   - a transient error reply (MOVED, ASK or TRYAGAIN while a Cluster slot
//     migrates, LOADING, ...), after a short backoff: the script did not run.
//
// Compare-and-delete is idempotent and never deletes another holder's key.
func (l *RedisLock) deleteToken(ctx context.Context, token string) (n int, first, err error) {
	var bo backoff
	for try := 1; ; try++ {
		n, err = redis.Int(l.reg.eval(ctx, releaseScript, []string{l.key}, token, l.channel()))
		switch {
		case try >= netTries || err == nil:
			return n, first, err
		case isStaleConn(err):
			if first == nil {
				first = err
			}
		case !isAmbiguous(err) && isTransient(err):
			if l.reg.sleep(ctx, bo.delay(), nil) != nil {
				return n, first, err
			}
		default:
			return n, first, err
		}
	}
}

// release runs the release script for h (see deleteToken) with a context
// that ignores the caller's cancellation but keeps the command timeout.
// first is the network error of a pass that this release replaces, or nil.
func (l *RedisLock) release(ctx context.Context, h *hold, first error) error {
	n, firstHere, err := l.deleteToken(context.WithoutCancel(ctx), h.token)
	if first == nil {
		first = firstHere // the script may have run
	}
	switch {
	case err != nil:
		// A hold whose validity had ended is reported lost too.
		return errors.Join(fmt.Errorf("lockyard: releasing %q: %w", l.key, err), l.lostAtRelease(h))
	case n == 0 && first != nil:
		return fmt.Errorf("%w: %q was gone at a retried release (the first attempt failed with %w and may have deleted it)", ErrLockLost, l.key, first)
	case n == 0:
		return fmt.Errorf("%w: %q expired or was taken by another holder", ErrLockLost, l.key)
	}
	return l.lostAtRelease(h)
}

// lostAtRelease returns ErrLockLost if h's validity ended before its key was
// deleted: another holder may have had it meanwhile.
func (l *RedisLock) lostAtRelease(h *hold) error {
	if h.lost(l.reg.now()) {
		return fmt.Errorf("%w: validity of %q ended before release", ErrLockLost, l.key)
	}
	return nil
}

// renew resets the TTL of the current hold if the registry holds the lock.
func (l *RedisLock) renew(ctx context.Context) error {
	r := l.reg
	h := l.hold.Load()
	if h == nil {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, l.key)
	}
	ttl := r.cfg.expireAfter
	sent := r.now()
	if h.lost(sent) {
		h.markLost()
		r.stats.lostHold(h)
		return fmt.Errorf("%w: validity of %q ended before renewal", ErrLockLost, l.key)
	}
	n, err := redis.Int(l.runRenew(ctx, h.token, ttl.Milliseconds()))
	switch {
	case errors.Is(err, ErrReplicaAck):
		return err
	case err != nil:
		return fmt.Errorf("lockyard: renewing %q: %w", l.key, err)
	case n == 0:
		h.markLost()
		r.stats.lostHold(h)
		return fmt.Errorf("%w: %q expired or was taken by another holder", ErrLockLost, l.key)
	}
	if !h.extend(r.now(), sent+int64(ttl-drift(ttl))) {
		h.markLost()
		r.stats.lostHold(h)
		return fmt.Errorf("%w: renewal of %q completed after its validity ended", ErrLockLost, l.key)
	}
	r.stats.renewals.Add(1)
	return nil
}

// mustUnlockLocal frees the local mutex held by the calling goroutine.
func (l *RedisLock) mustUnlockLocal() {
	if err := l.local.Unlock(); err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
}
