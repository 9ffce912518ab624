package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
	"github.com/lockyard/lockyard/internal/wire"
)

// A semaphore instance's state, at the bottom of the semaphore's files: its
// fields, its permits, their holds (install) and the give-back in the
// background. Above it: semacquire.go (the head's attempt), semlease.go
// (release and the local hand-off of a permit), and on top semaphore.go,
// the public face.

// kindSemaphore names the kind of a Semaphore and its Leases.
const kindSemaphore = "semaphore"

// Semaphore is a counting semaphore on one key: at most Permits leases of
// it are held at once across every process that uses the key with this
// registry key. Each Lease is one permit, with its own token and TTL,
// which expires by the Redis server's clock: a crashed holder's permit
// comes back when its TTL runs out, taken by the next attempt.
//
// The leases of one registry wait locally first, in FIFO order: only the
// first of them talks to Redis, as the head of a RedisLock's local queue
// does. Waiters of every registry take turns in arrival order in the key's
// wait queue (the lock's, see lua/prelude.lua), woken by a message on the
// registry's own turn channel when its turn comes (PubSubLock: only the
// registry told wakes) or by polling (SpinLock); a registry whose head gets a
// permit while more of its leases wait queues again behind the others. A
// permit released while another lease of the same registry waits passes
// to it, without a round trip or with one (as a lock's hold is handed off),
// unless waiters of other registries are in line for it.
//
// Every permit carries the count of permits its holder was made with (at
// the end of its token: "#" and the count): while permits are held, an
// acquisition with another count than the soonest live permit's fails
// with ErrInvalidConfig naming both (the Semaphore's first, and then at
// most once a second: compareEvery), so that two deployments that disagree
// on the limit are told, not each held to its own. To change the count,
// stop or drain the processes of the old one and let their permits go (or,
// once they are stopped, take what they left out with lockyard release
// --force): the next acquisition sets the new one. A permit taken by a
// lockyard from before this check carries no count: while it is the
// soonest live permit, nothing is compared.
//
// A Semaphore needs one Redis master (a single node, Sentinel, or Cluster:
// its keys share one hash slot) and the TIME command; a Redlock registry or
// one made WithReplicaAck refuses it with ErrInvalidConfig.
type Semaphore struct {
	eng       *engine
	proto     *semProto
	key, name string
	permits   int
	count     string // the suffix of its tokens: "#" permits (wire.CountSuffix)
	// waiter is the semaphore instance's id in the key's wait queue, as a
	// RedisLock's (one entry per registry, kept by its successive heads).
	waiter   core.Waiter
	head     reentrant.Mutex // owned by the lease that talks to Redis; the others queue on it
	wake     *core.Waker     // wakes the head: turn messages, or a permit handed off
	pubsub   bool
	lastUsed atomic.Int64
	// compared: when (registry clock) an attempt last compared the
	// instance's count of permits with the holders' and was not refused;
	// 0: never (compareEvery).
	compared atomic.Int64
	// crowd: whether the instance expects waiters in line (it queued, a
	// TryAcquire found every permit taken, or a release found waiters,
	// within crowdMemory: core.Crowd). While it does, it gives its permits
	// back by script, which gives their turns; else by plain commands
	// (releasePlain), and its attempts ask first whether the semaphore key
	// or its queue exist at all.
	crowd core.Crowd

	turn semTurn // owned by the head

	// mu guards the following.
	mu      sync.Mutex
	needers int       // leases waiting for a permit in this registry (the head included)
	held    int       // leases held
	spare   []*permit // handed off by a lease, for the next needer
	queued  bool      // the instance's entry is in the key's wait queue
	// queuedAt counts the head's writes of queued, so that a pass that
	// took the entry out of line clears queued only if no attempt of the
	// head set it since the pass was sent.
	queuedAt uint64
	grants   grantBook // the attempts that a script may grant a permit to (semgrant.go)
	// grantWait: a grant queued the instance again for its next head,
	// which waits for its own grant until then (registry clock; 0: none).
	grantWait int64
	// leftClaim is the number of a grant left to the next attempt's claim
	// (granted: too little validity left), until it is got or given back
	// (0: none): if the instance's leases all end without claiming it, the
	// last gives it back (end).
	leftClaim uint64
}

// semTurn is the head's bookkeeping between heads: the instance's wait in
// line, which the next head goes on with (an acquisition that queued the
// instance again for the leases behind it, or a failed attempt of a head
// that then took a permit handed off, says when its turn may come).
type semTurn struct {
	waitUntil int64 // registry clock; 0: none
	mark      int64 // the waker's count when it was queued
	after     int   // turn messages after mark until its turn (1: its own)
	rtt       time.Duration
}

// permit is one permit held in Redis: a token in the semaphore's sorted
// set, and the hold the watchdog renews. It passes from lease to lease of
// one registry (a hand-off); it is the holder of its holds.
type permit struct {
	s   *Semaphore // whose permit it is
	h   atomic.Pointer[core.Hold]
	run core.Run // its run of local holds (owned by the lease that holds it)
}

// compareEvery is how often a Semaphore's acquisitions compare its count
// of permits with the holders': its first attempt does, and after one
// that was not refused, the first attempt of an acquisition a second or
// more later (the comparison is one call in Redis, about 4% of a contended
// acquisition's).
const compareEvery = time.Second

func newSemaphore(r *engine, proto *semProto, name string, permits int) *Semaphore {
	key := r.layout.LockKey(name)
	s := &Semaphore{eng: r, proto: proto, key: key, permits: permits, count: wire.CountSuffix(permits), pubsub: r.cfg.lockType == PubSubLock, wake: core.NewWaker(true)}
	s.waiter.Renew(&r.core)
	s.name, _ = r.layout.UserKey(key)
	s.touch()
	return s
}

func (s *Semaphore) touch() { s.lastUsed.Store(s.eng.core.Now()) }

// The Semaphore as a cache entry.
func (s *Semaphore) cacheKey() string { return s.name }

func (s *Semaphore) used() int64 { return s.lastUsed.Load() }

func (s *Semaphore) signal(k int64) { s.wake.Signal(k) }

func (s *Semaphore) kind() string { return kindSemaphore }

func (s *Semaphore) wokenBy() wakeup { return byTurn }

func (s *Semaphore) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.needers > 0 || s.held > 0
}

// install makes h the hold of p, tracked by the watchdog.
func (s *Semaphore) install(p *permit, h *core.Hold) {
	p.h.Store(h)
	s.eng.core.Watchdog.Track(h)
}

// releaseLater gives back, in the background and best effort, a permit
// that this registry may hold with token without knowing it
// (engine.releaseLater).
func (s *Semaphore) releaseLater(token string) {
	s.eng.releaseLater(func(ctx context.Context) (bool, error) {
		done, _, err := s.proto.release(ctx, s.key, token, s.permits)
		return done, err
	})
}
