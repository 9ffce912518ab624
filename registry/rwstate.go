package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// A read-write lock instance's state, at the bottom of its files: its
// fields, its holds and the give-back in the background. Above it:
// rwacquire.go (sharing a hold, and the head's attempt), rwlease.go
// (release, ReleaseAfter, Downgrade), and on top rwlock.go, the public
// face.

// kindRWLock names the kind of an RWLock and its Leases.
const kindRWLock = "rwlock"

// RWLock is a read-write lock on one key: any number of read leases at
// once across every process that uses the key with this registry key, or
// one write lease. Each hold expires by the Redis server's clock, a
// reader's at its own TTL: a crashed reader frees its share when its TTL
// runs out, not the longest reader's.
//
// Waiters of every registry take turns in arrival order in the key's wait
// queue, by phase: the readers at the front of the line enter together,
// and a writer waits for the readers that hold the key and holds up every
// reader that comes after it, so neither side starves. They are woken by a
// message on the registry's own turn channel (PubSubLock) or poll
// (SpinLock).
//
// In one registry, goroutines queue in FIFO order on the instance: readers
// together, a writer alone (a writer waits for its own process's readers
// as for any other's). The readers of one registry share one hold in
// Redis: a reader that comes while its registry reads joins that hold
// without a round trip, unless a writer waits (its registry is told, or
// finds out at the latest rwJoinCheck later), so 16 reading goroutines
// cost Redis about as much as one. A hold let in with a writer waiting
// behind it in line (the readers queued behind a writer, entering when it
// leaves) is shared only by the readers that were waiting then: a reader
// that comes later queues behind that writer. Under WithFencing each read lease takes
// a hold of its own, so that every lease gets a larger fencing token than
// every earlier one, reads and writes alike.
//
// As with sync.RWMutex, a goroutine must not take a second read lease of
// a key while it holds one: leases are not reentrant, and a writer that
// waits in between makes the second wait behind it, while the writer waits
// for the first.
//
// There is no upgrade from read to write: two readers that both upgrade
// would each wait for the other. Release the read lease and acquire the
// write side, then check again what was read (it may have changed in
// between); or take the write side first and Downgrade it.
//
// An RWLock needs one Redis master (a single node, Sentinel, or Cluster:
// its keys share one hash slot), Redis 6.2 or later and the TIME command;
// a Redlock registry or one made WithReplicaAck refuses it with
// ErrInvalidConfig.
type RWLock struct {
	eng       *engine
	proto     *rwProto
	key, name string
	// local queues the leases of this registry: readers shared, writers
	// exclusive, in FIFO order.
	local reentrant.Mutex
	// head is held by the one lease that talks to Redis to acquire.
	head reentrant.Mutex
	// waiter is the instance's id in the key's wait queue; its entry is
	// the id, "/", and the side its head waits for.
	waiter   core.Waiter
	wake     *core.Waker // wakes the head: turn messages
	pubsub   bool
	lastUsed atomic.Int64

	rtt time.Duration // the head's last round trip (owned by head)

	// mu guards the following.
	mu sync.Mutex
	// shared is the registry's read hold that new readers join, or nil.
	shared  *rwHold
	needers int    // leases waiting (locally or in Redis)
	held    int    // leases held
	queued  string // the instance's entry in the key's wait queue, or ""
	// grant is the grant number of the entry in line (rwgrant.go), and
	// gotSeqs the last numbers whose holds the instance got (a ring, at
	// gotAt).
	grant   rwGrantNo
	gotSeqs [rwGotNumbers]uint64
	gotAt   int
}

// rwJoinCheck bounds how long the readers of a registry share its read
// hold without asking Redis whether a writer waits: the next reader after
// that asks (one script), and queues behind the writer if one does. A
// registry that hears turn messages (PubSubLock) is told at once.
const rwJoinCheck = 10 * time.Millisecond

// rwHold is one hold of an RWLock in Redis: a writer's, or a registry's
// read hold, which its read leases share. It is the holder of its hold.
type rwHold struct {
	l *RWLock
	h *core.Hold
	// The following are guarded by l.mu.
	write  bool
	users  int   // leases that hold it
	closed bool  // new readers no longer join it (a writer waits, or it was lost)
	asked  int64 // registry clock of its last admission in Redis
	// before, when not 0: only leases that began to wait before it (the
	// registry clock) join the hold: Redis let it in with a writer in line
	// behind it, and readers that come later queue behind that writer.
	before int64
	// keep is the registry clock until which a lease asked it kept
	// (ReleaseAfter) while other leases still held it.
	keep int64
}

func newRWLock(r *engine, proto *rwProto, name string) *RWLock {
	key := r.layout.LockKey(name)
	l := &RWLock{eng: r, proto: proto, key: key, pubsub: r.cfg.lockType == PubSubLock, wake: core.NewWaker(true)}
	l.waiter.Renew(&r.core)
	l.name, _ = r.layout.UserKey(key)
	l.touch()
	return l
}

func (l *RWLock) touch() { l.lastUsed.Store(l.eng.core.Now()) }

// The RWLock as a cache entry.
func (l *RWLock) cacheKey() string { return l.name }

func (l *RWLock) used() int64 { return l.lastUsed.Load() }

// signal counts turn messages: the head's turn, or a writer that waits
// for this registry's readers (rwacquire.lua, yield). Either way new
// readers stop joining the registry's read hold and ask Redis.
func (l *RWLock) signal(k int64) {
	l.mu.Lock()
	if l.shared != nil {
		l.shared.closed = true
	}
	l.mu.Unlock()
	l.wake.Signal(k)
}

func (l *RWLock) kind() string { return kindRWLock }

func (l *RWLock) wokenBy() wakeup { return byTurn }

func (l *RWLock) busy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.needers > 0 || l.held > 0
}

// releaseLater gives back, in the background and best effort, a hold that
// this registry may have with token without knowing it
// (engine.releaseLater).
func (l *RWLock) releaseLater(token string) {
	l.eng.releaseLater(func(ctx context.Context) (bool, error) {
		done, _, err := l.proto.release(ctx, l.key, token)
		return done, err
	})
}

var _ core.Holder = (*rwHold)(nil)

func (p *rwHold) KindName() string { return kindRWLock }

// HoldLost: no new reader joins a lost hold; its leases see the loss
// (Lost, Release), and the local queue moves on when they are released.
func (p *rwHold) HoldLost(*core.Hold) {
	p.l.mu.Lock()
	p.closed = true
	if p.l.shared == p {
		p.l.shared = nil
	}
	p.l.mu.Unlock()
}
