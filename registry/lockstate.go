package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// A lock instance's state, at the bottom of the lock's files: its fields,
// its phase, its hold (begin, install, track), the hint its scripts get,
// and the releases in the background. The lock's other files build on it:
// acquire.go (the attempt), lockturn.go (the local hand-off), revoke.go (a
// hold lost while held), lifecycle.go (lock and unlock), try.go, and on top
// redislock.go and lease.go, the public face.

// kindLock names the kind of a RedisLock and its Leases.
const kindLock = "lock"

// RedisLock is a distributed lock on one key, obtained from a Registry. It
// pairs a local reentrant mutex owned by a goroutine with a key in Redis:
// goroutines of one registry queue locally in FIFO order, and only the head
// of the queue talks to Redis. The holding goroutine may lock again; each
// Lock needs an Unlock by the same goroutine, and only the outermost one
// releases the key in Redis.
type RedisLock struct {
	eng   *engine
	proto *mutexProto
	// key is the full Redis key (wire.Layout.LockKey); name is the key the
	// lock was obtained with, a substring of key. The wait marker, fence
	// counter and channel are derived from key when needed, so that a
	// cached lock stays small.
	key, name string
	local     reentrant.Mutex
	// hold is the current acquisition in Redis, nil when not held. Only the
	// goroutine that owns local stores it; anyone may load it.
	hold     atomic.Pointer[core.Hold]
	phase    atomic.Int32 // a phase (lifecycle.go), for tests and debugging
	lastUsed atomic.Int64 // registry clock of the last Obtain, lock or unlock
	since    atomic.Int64 // registry clock of the current outermost acquisition (observe.go)
	wake     *core.Waker  // wakes the remote waiter (PubSubLock; nil otherwise)
	// listen asks the release subscriber for the key's messages while the
	// remote waiter waits (PubSubLock; nil otherwise).
	listen core.Listener
	// waiter is this instance's id in the key's wait queue: the registry
	// id, "/", and a number unique to the instance (and to its wait: see
	// core.Waiter), so that an instance evicted from the cache and kept by
	// the caller, and the one Obtain returns next, wait for each other like
	// two registries.
	waiter core.Waiter
	// turn is the hand-off bookkeeping, owned by the goroutine that owns
	// local (the mutex's hand-over orders the accesses).
	turn turn
}

func newRedisLock(r *engine, proto *mutexProto, name string) *RedisLock {
	key := r.layout.LockKey(name)
	l := &RedisLock{eng: r, proto: proto, key: key}
	l.waiter.Renew(&r.core)
	l.name, _ = r.layout.UserKey(key) // name, sharing key's memory
	l.wake = core.NewWaker(r.cfg.lockType == PubSubLock)
	if l.wake != nil {
		l.listen = r.subscriber.listener(key)
	}
	l.touch()
	return l
}

func (l *RedisLock) touch() { l.lastUsed.Store(l.eng.core.Now()) }

// The RedisLock as a cache entry.
func (l *RedisLock) cacheKey() string { return l.name }

func (l *RedisLock) busy() bool { return l.local.Busy() }

func (l *RedisLock) used() int64 { return l.lastUsed.Load() }

func (l *RedisLock) signal(k int64) { l.wake.Signal(k) }

func (l *RedisLock) kind() string { return kindLock }

func (l *RedisLock) wokenBy() wakeup { return byRelease }

// renew resets the TTL of the current hold if the registry holds the lock
// (RenewLock), to ttl, or to the hold's own TTL if ttl is 0; a ttl other
// than the hold's becomes its TTL from now on (RenewLockFor).
func (l *RedisLock) renew(ctx context.Context, ttl time.Duration) error {
	h := l.lockCurrent()
	if h == nil {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, l.key)
	}
	defer h.Renewing.Unlock()
	return h.Renew(ctx, ttl)
}

// lockCurrent returns the lock's current hold with its renewing lock
// taken, or nil if the registry holds none. A hold that was released (or
// passed on) while it waited for the lock is not returned: its TTL must not
// reach Redis after its successor's.
func (l *RedisLock) lockCurrent() *core.Hold {
	for {
		h := l.hold.Load()
		if h == nil {
			return nil
		}
		h.Renewing.Lock()
		if !h.Released() {
			return h
		}
		h.Renewing.Unlock()
		if l.hold.Load() == h { // being released: not held any more
			return nil
		}
	}
}

// The lifecycle of a lock in one registry. The goroutine that owns the
// local mutex drives it through these phases:
//
//	idle        → acquiring    the head of the local queue obtains the key (lock, TryLock)
//	acquiring   → held         obtained (begin)
//	acquiring   → idle         failed: ctx ended, Close, a final Redis error (unlockLocal)
//	held        → handingOver  the outermost Unlock finds goroutines queued locally
//	handingOver → held         the next goroutine inherits the hold (a free pass, or the pass kept the key)
//	handingOver → acquiring    the inherited hold had lost its validity: the next goroutine obtains anew
//	handingOver → releasing    no pass after all: the key is deleted
//	handingOver → idle         the pass released the key for another registry, or failed (teardown)
//	held        → releasing    the outermost Unlock, nobody queued (release)
//	releasing   → idle         teardown
//
// A hold (core.Hold, internal/core/hold.go) is one acquisition in Redis; loss is a property of the
// hold, never of the lock. Every path that ends a turn goes through
// teardown, which retires the hold (no more renewals or loss reports),
// forgets it and frees the local mutex; release retires the hold before
// the delete, so that a renewal landing after it is not taken for a loss.
type phase int32

const (
	idle        phase = iota // not held, nobody acquiring
	acquiring                // the head of the local queue is obtaining the key
	held                     // a goroutine holds the lock
	handingOver              // the outermost Unlock passes the hold to the next local goroutine
	releasing                // the outermost Unlock deletes the key
)

var phaseNames = [...]string{"idle", "acquiring", "held", "handing over", "releasing"}

func (p phase) String() string { return phaseNames[p] }

func (l *RedisLock) setPhase(p phase) { l.phase.Store(int32(p)) }

// begin makes h the lock's hold, held: the watchdog renews it from now on,
// and local waiters are guarded against its loss.
func (l *RedisLock) begin(h *core.Hold) {
	l.since.Store(l.eng.core.Now()) // before a revocation can read it
	l.hold.Store(h)
	l.setPhase(held) // before the guard: a loss it finds at once is revocable
	l.track(h)
}

// install makes h the lock's hold without changing the phase: a pass
// installs the next goroutine's hold while handing over, and the phase
// stays handingOver (not revocable) until that goroutine inherits it
// (inherit handles a loss found meanwhile).
func (l *RedisLock) install(h *core.Hold) {
	l.hold.Store(h)
	l.track(h)
}

// track hands h, the lock's hold, to the watchdog, and guards it if
// goroutines queue behind it.
func (l *RedisLock) track(h *core.Hold) {
	l.eng.core.Watchdog.Track(h)
	l.touch()
	if l.local.Waiters() > 0 {
		h.Guard()
	}
}

// releaseLater frees, in the background, the key that this registry may
// hold with token without knowing it (engine.releaseLater), by release.lua,
// which gives the turn.
func (l *RedisLock) releaseLater(token string) {
	l.eng.releaseLater(func(ctx context.Context) (bool, error) {
		done, _, err := l.proto.release(ctx, l.key, token, false)
		return done, err
	})
}

// gone is the loss of a hold whose key was not its own at its release.
func (l *RedisLock) gone() error { return core.KeyGone(l.key) }

// turn is the hand-off bookkeeping of one lock instance, owned by the
// goroutine that owns its local mutex.
type turn struct {
	run core.Run // the run of local holds: when it began, its last command, its free passes
	// span bounds the current run of local holds: chainSpan, or as long
	// as this instance waited, after its last run, for a client that took
	// the key meanwhile and writes no queue entry (up to maxChainSpan):
	// against a client that takes the key again at once after each of its
	// releases (a Spring client in a loop), and so wins most races for
	// it, the two get about equal time.
	span time.Duration
	// freed: when (mono ns) the last run ended with a release to nobody
	// in line (0: it did not).
	freed int64
	// rtt: the last round trip of an obtain or a pass that was not
	// granted the key (a poller's next try reaches the server that long
	// after its sleep).
	rtt time.Duration
	// yield: the key was released at the end of a run of local holds;
	// the next acquisition waits grace before its first attempt.
	yield bool
	grace time.Duration
	// foreign: when (mono ns) a client took the key this instance let go
	// at the end of a run, during the grace (0: never): one that may
	// write no queue entry, for which the grace is longer (lockturn.go).
	foreign int64
	// waitUntil (mono ns; 0: none) and after: a pass released the key for
	// another waiter's turn and queued this instance; the next acquisition
	// waits until then, or for after release messages, before it tries.
	waitUntil int64
	mark      int64 // the waker's count of messages when the pass was sent
	after     int
	// taken: an obtain found the key held, and no acquisition has since
	// got it at its first attempt. While it is set, a first attempt runs
	// the obtain script at once instead of trying a plain SET first.
	taken bool
	// crowd: what the releases found queued (core.Crowd). Unlike taken,
	// an acquisition at the first attempt does not clear it (obtain.lua
	// may give a free key to a caller while a poller not yet due waits):
	// only releases that find nobody queued do, for crowdMemory. While
	// waiters are expected, releases run release.lua, which gives the turn
	// (mutexProto.release).
	crowd core.Crowd
	// queued: this instance's entry is in the key's wait queue (a waiting
	// attempt failed, or a pass queued it, and no acquisition has
	// succeeded since).
	queued bool
}

// hint describes an obtain or pass of this lock instance for the protocol. An
// instance that is not the cached one (evicted, and kept by its caller)
// hears no release message: the subscriber wakes the cached instance. It
// queues as a poller, so that no turn is given to it that it would not
// hear of.
func (l *RedisLock) hint(free, waits bool) hint {
	r := l.eng
	deaf := false
	if waits && l.wake != nil {
		e, ok := r.cache.peek(l.name)
		deaf = !ok || e != cached(l)
	}
	return hint{free: free, waits: waits, waiter: l.waiter.ID(), deaf: deaf, spread: rand.N(r.cfg.idle/4 + 1), rtt: l.turn.rtt}
}
