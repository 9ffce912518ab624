// Package reentrant provides a reentrant, FIFO, weighted mutex whose waits
// can be cancelled, owned by goroutines or by tokens that any goroutine
// carries.
//
// Every method names its owner (an Owner). Self is the calling goroutine,
// identified by its runtime id (github.com/petermattis/goid: a few
// nanoseconds, no allocation, used by CockroachDB); NewOwner makes an owner
// that is no goroutine, for a hold that one goroutine takes and another
// releases. An owner may acquire again; each acquisition needs a matching
// Unlock.
//
// Each acquisition asks for a Request: exclusive (the zero Request: the
// whole mutex, one owner at a time), shared (any number of shared owners at
// once, none beside an exclusive one), or a weight out of the mutex's size
// (n of N: a counting semaphore, see NewWeighted). Waiters queue in arrival
// order, and the mutex goes to the head of the queue as soon as its request
// fits, on the rules of golang.org/x/sync/semaphore: a waiter that does not
// fit yet holds up every waiter behind it, so a large request is never
// starved by a stream of small ones (and a writer is not starved by
// readers). Ownership is handed directly to the waiters it goes to, so an
// owner that just unlocked cannot barge ahead of one that has been waiting
// (Jain fairness close to 1 under contention).
package reentrant

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrNotOwner is returned by Unlock when the owner it names does not hold
// the mutex.
var ErrNotOwner = errors.New("reentrant: not the owner of the mutex")

// ErrAborted is returned by Lock when its abort channel was closed first.
var ErrAborted = errors.New("reentrant: wait aborted")

// ErrRevoked is returned by Leave and Unlock to an owner whose ownership
// was revoked (see Revoke), once for each hold it had then.
var ErrRevoked = errors.New("reentrant: ownership was revoked")

// ErrTooHeavy is returned by Lock and TryLock for a request that can never
// fit: a weight below 1 or above the mutex's size.
var ErrTooHeavy = errors.New("reentrant: request weight out of range")

// Mutex is a reentrant, weighted mutex owned by goroutines or tokens
// (Owner). The zero value is an unlocked mutex of unbounded size, for
// Exclusive and Shared requests. A Mutex must not be copied after first
// use.
type Mutex struct {
	size int64 // 0: unbounded

	// mu guards the following.
	mu     sync.Mutex
	held   int64     // weight held by all owners
	owners []holding // who holds m: one for an exclusive owner
	// index maps each owner to its place in owners while there are many
	// (more than indexFrom: shared owners, a read-write lock's leases), so
	// that finding one costs the same however many hold m.
	index   map[Owner]int
	waiters []*waiter
	// revoked counts the holds of owners whose ownership was revoked: each
	// later Leave or Unlock of theirs consumes one. An entry stays until
	// consumed (a goroutine that died keeps its own).
	revoked map[Owner]int
	nrev    atomic.Int32 // entries in revoked, read without mu
	// sole mirrors the owner while exactly one holds m (else 0), for Owner
	// without mu.
	sole atomic.Int64
}

// NewWeighted returns a Mutex of size n (at least 1): Weighted requests
// take their Weight of it, Shared ones 1, Exclusive ones all of it.
func NewWeighted(n int64) *Mutex { return &Mutex{size: max(n, 1)} }

// holding is one owner's part of m.
type holding struct {
	who     Owner
	weight  int64
	depth   int  // its holds: 1 plus its re-entries
	leaving bool // its last Leave reported last: it is finishing, not revocable
}

// waiter is one owner queued in Lock. ready is closed by the goroutine
// that grants it m, after it made who an owner under mu.
type waiter struct {
	who    Owner
	req    Request
	weight int64
	ready  chan struct{}
}

// weight returns what req takes of m, or ErrTooHeavy.
func (m *Mutex) weight(req Request) (int64, error) {
	size := m.size
	if size == 0 {
		size = unbounded
	}
	switch req.Mode {
	case Exclusive:
		return size, nil
	case Shared:
		return 1, nil
	}
	if req.Weight < 1 || req.Weight > size {
		return 0, ErrTooHeavy
	}
	return req.Weight, nil
}

// free returns the weight not held. mu must be held.
func (m *Mutex) free() int64 {
	size := m.size
	if size == 0 {
		size = unbounded
	}
	return size - m.held
}

// find returns the index of who in owners, or -1. mu must be held.
func (m *Mutex) find(who Owner) int {
	if m.index != nil {
		if i, ok := m.index[who]; ok {
			return i
		}
		return -1
	}
	for i := range m.owners {
		if m.owners[i].who == who {
			return i
		}
	}
	return -1
}

// TryLock acquires m for who as req asks if that fits now and nobody is
// queued, or re-enters it if who already owns it (whatever req asks: its
// part does not change). reentered reports the second case. It never
// blocks.
func (m *Mutex) TryLock(req Request, who Owner) (ok, reentered bool, err error) {
	w, err := m.weight(req)
	if err != nil {
		return false, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(who); i >= 0 {
		m.owners[i].depth++
		return true, true, nil
	}
	if len(m.waiters) == 0 && m.free() >= w {
		m.grant(who, w)
		return true, false, nil
	}
	return false, false, nil
}

// Observer is told when a Lock call has queued (an interface rather than a
// func, so that passing a pointer allocates nothing).
type Observer interface{ Queued() }

// How says how Lock acquired the mutex.
type How int

const (
	Fresh     How = iota // req fitted at once
	Reentered            // the caller already owned m
	Queued               // the caller waited for m to be handed over
)

// Lock acquires m for who as req asks, re-entering it if who already owns
// it (as TryLock), and says how; the calling goroutine waits. It waits in
// FIFO order until m is granted, ctx is done (ctx.Err() is returned) or
// abort is closed (ErrAborted). If the caller has to wait, queued.Queued
// (if queued is not nil) is called once it is in the queue, before it
// blocks: a caller can then check, without a race with the owner, whether
// the owner should be revoked. A wait that returns an error leaves nothing
// held. A wait whose ctx ends just as m is granted succeeds and keeps m: the
// previous owner may have left the new one something to inherit (the
// registry's hold), which giving m back could strand. (x/sync's semaphore
// does the opposite: it gives such a late grant back and returns
// ctx.Err().)
func (m *Mutex) Lock(ctx context.Context, abort <-chan struct{}, queued Observer, req Request, who Owner) (How, error) {
	w, err := m.weight(req)
	if err != nil {
		return Fresh, err
	}
	m.mu.Lock()
	if i := m.find(who); i >= 0 {
		m.owners[i].depth++
		m.mu.Unlock()
		return Reentered, nil
	}
	if len(m.waiters) == 0 && m.free() >= w {
		m.grant(who, w)
		m.mu.Unlock()
		return Fresh, nil
	}
	wt := &waiter{who: who, req: req, weight: w, ready: make(chan struct{})}
	m.waiters = append(m.waiters, wt)
	m.mu.Unlock()
	if queued != nil {
		queued.Queued()
	}

	select {
	case <-wt.ready:
		return Queued, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-abort:
		err = ErrAborted
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.find(who) >= 0 {
		// Granted as we gave up: keep it. The caller may inherit what the
		// previous owner left for it, so giving it back here could strand
		// that.
		return Queued, nil
	}
	front := len(m.waiters) > 0 && m.waiters[0] == wt
	m.remove(wt)
	if front {
		// The head leaves: those behind it that fit now go (x/sync).
		m.wake()
	}
	return Queued, err
}

// Depth returns the hold count of who: 0 if it does not own m.
func (m *Mutex) Depth(who Owner) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(who); i >= 0 {
		return m.owners[i].depth
	}
	return 0
}

// Unlock releases one hold of who. The last one gives who's part back, and
// m goes to the waiters at the head of the queue that fit. It returns
// ErrNotOwner, and changes nothing, if who does not own m, or ErrRevoked if
// it lost a hold to Revoke.
func (m *Mutex) Unlock(who Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(who)
	if i < 0 {
		return m.notOwner(who)
	}
	m.owners[i].depth--
	if m.owners[i].depth == 0 {
		m.drop(i)
		m.wake()
	}
	return nil
}

// Leave releases one hold of who unless it is the last: then it changes
// nothing and reports last, and the caller finishes what the outermost hold
// guarded before calling Unlock or HandOff; until then who cannot be
// revoked. It returns ErrNotOwner if who does not own m, or ErrRevoked if
// it lost a hold to Revoke.
func (m *Mutex) Leave(who Owner) (last bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(who)
	if i < 0 {
		return false, m.notOwner(who)
	}
	if m.owners[i].depth == 1 {
		m.owners[i].leaving = true
		return true, nil
	}
	m.owners[i].depth--
	return false, nil
}

// HandOff gives who's part of m, held once, to the head of the queue, and
// reports true, if the head fits once who's part is given back (so that
// what who held passes to it). Otherwise it changes nothing and reports
// false: who still owns m. It returns ErrNotOwner if who does not own m.
func (m *Mutex) HandOff(who Owner) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(who)
	if i < 0 {
		return false, ErrNotOwner
	}
	if len(m.waiters) == 0 || m.free()+m.owners[i].weight < m.waiters[0].weight {
		return false, nil
	}
	m.drop(i)
	m.wake()
	return true, nil
}

// Next returns the request of the waiter that HandOff would hand m to now,
// and false if nobody waits.
func (m *Mutex) Next() (Request, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiters) == 0 {
		return Request{}, false
	}
	return m.waiters[0].req, true
}

// Owner returns the owner of m now if exactly one owner holds it, or the
// zero Owner: one atomic load, a snapshot that may be stale by the time it
// is used.
func (m *Mutex) Owner() Owner { return Owner(m.sole.Load()) }

// Waiters returns the number of owners queued in Lock.
func (m *Mutex) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// Busy reports whether m is owned or waited for.
func (m *Mutex) Busy() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owners) > 0 || len(m.waiters) > 0
}

// Downgrade turns who's exclusive part of m into a shared one, at once and
// in place: no other owner can take m in between, and the shared waiters at
// the head of the queue join who. It returns ErrNotOwner if who does not
// own m, and changes nothing if who's part is not the whole of m (shared,
// or a weight).
func (m *Mutex) Downgrade(who Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.find(who)
	if i < 0 {
		return m.notOwner(who)
	}
	size := m.size
	if size == 0 {
		size = unbounded
	}
	if m.owners[i].weight != size {
		return nil
	}
	m.owners[i].weight = 1
	m.held -= size - 1
	m.wake()
	return nil
}
