// Package reentrant provides a reentrant, FIFO mutex whose waits can be
// cancelled, owned by a goroutine or by a token that any goroutine carries.
//
// Every method names its owner (an Owner). Self is the calling goroutine,
// identified by its runtime id (github.com/petermattis/goid: a few
// nanoseconds, no allocation, used by CockroachDB); NewOwner makes an owner
// that is no goroutine, for a hold that one goroutine takes and another
// releases. The owner may acquire again; each acquisition needs a matching
// Unlock. Waiters queue in arrival order and ownership is handed directly to
// the head of the queue on the last Unlock, so a goroutine that just unlocked
// cannot barge ahead of one that has been waiting (no starvation, Jain
// fairness close to 1 under contention).
package reentrant

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/petermattis/goid"
)

// ErrNotOwner is returned by Unlock when the owner it names does not hold
// the mutex.
var ErrNotOwner = errors.New("reentrant: not the owner of the mutex")

// ErrAborted is returned by Lock when its abort channel was closed first.
var ErrAborted = errors.New("reentrant: wait aborted")

// ErrRevoked is returned by Leave and Unlock to an owner whose ownership
// was revoked (see Revoke), once for each hold it had then.
var ErrRevoked = errors.New("reentrant: ownership was revoked")

// Owner identifies who holds a Mutex: a goroutine (Self, a positive
// runtime id) or a token made by NewOwner (negative). The zero Owner is
// nobody.
type Owner int64

// Self returns the calling goroutine as an Owner.
func Self() Owner { return Owner(goid.Get()) }

var lastToken atomic.Int64

// NewOwner returns an owner that is no goroutine and differs from every
// other Owner of the process: any goroutine may act for it.
func NewOwner() Owner { return Owner(-lastToken.Add(1)) }

// Mutex is a reentrant mutex owned by a goroutine or a token (Owner). The
// zero value is an
// unlocked mutex. A Mutex must not be copied after first use.
type Mutex struct {
	// mu guards the following.
	mu      sync.Mutex
	owner   Owner // 0 when free
	depth   int   // hold count of the owner
	leaving bool  // the owner's last Leave reported last: it is finishing, not revocable
	waiters []*waiter
	// revoked counts the holds of owners whose ownership was revoked: each
	// later Leave or Unlock of theirs consumes one. An entry stays until
	// consumed (a goroutine that died keeps its own).
	revoked map[Owner]int
	nrev    atomic.Int32 // entries in revoked, read without mu
	// cur mirrors owner, for Owner without mu.
	cur atomic.Int64
}

// setOwner makes who the owner, depth times. mu must be held.
func (m *Mutex) setOwner(who Owner, depth int) {
	m.owner, m.depth = who, depth
	m.cur.Store(int64(who))
}

// waiter is one owner queued in Lock. ready is closed by the goroutine
// that hands ownership over, after it set owner to who under mu.
type waiter struct {
	who   Owner
	tag   int64 // the caller's, for NextTag
	ready chan struct{}
}

// TryLock acquires m for who if it is free and nobody is queued, or
// re-enters it if who already owns it. reentered reports the second case.
// It never blocks.
func (m *Mutex) TryLock(who Owner) (ok, reentered bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.owner == who:
		m.depth++
		return true, true
	case m.owner == 0 && len(m.waiters) == 0:
		m.setOwner(who, 1)
		return true, false
	}
	return false, false
}

// Observer is told when a Lock call has queued (an interface rather than a
// func, so that passing a pointer allocates nothing).
type Observer interface{ Queued() }

// How says how Lock acquired the mutex.
type How int

const (
	Fresh     How = iota // m was free
	Reentered            // the caller already owned m
	Queued               // the caller waited for m to be handed over
)

// Lock acquires m for who, re-entering it if who already owns it, and says
// how; the calling goroutine waits. It waits in FIFO order until m is handed
// over, ctx is done (ctx.Err() is returned) or abort is closed (ErrAborted).
// tag is the caller's value for NextTag while it waits. If the caller has
// to wait, queued.Queued (if queued is not nil) is called
// once it is in the queue, before it blocks: a caller can then check,
// without a race with the owner, whether the owner should be revoked.
// A wait that returns an error leaves nothing held. A wait whose ctx ends
// just as m is handed over succeeds and keeps m: the previous owner may have
// left the new one something to inherit (the registry's hold), which passing
// m on could strand. (x/sync's semaphore does the opposite: it gives such a
// late grant back and returns ctx.Err().)
func (m *Mutex) Lock(ctx context.Context, abort <-chan struct{}, queued Observer, tag int64, who Owner) (How, error) {
	m.mu.Lock()
	switch {
	case m.owner == who:
		m.depth++
		m.mu.Unlock()
		return Reentered, nil
	case m.owner == 0 && len(m.waiters) == 0:
		m.setOwner(who, 1)
		m.mu.Unlock()
		return Fresh, nil
	}
	w := &waiter{who: who, tag: tag, ready: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	if queued != nil {
		queued.Queued()
	}

	var err error
	select {
	case <-w.ready:
		return Queued, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-abort:
		err = ErrAborted
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == who {
		// Ownership was handed over as we gave up: keep it. The caller may
		// inherit what the previous owner left for it, so passing it on
		// here could strand that.
		return Queued, nil
	}
	m.remove(w)
	return Queued, err
}

// Depth returns the hold count of who: 0 if it does not own m.
func (m *Mutex) Depth(who Owner) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != who {
		return 0
	}
	return m.depth
}

// Unlock releases one hold of who. The last one hands m to the
// longest-waiting owner. It returns ErrNotOwner, and changes nothing, if who
// does not own m, or ErrRevoked if it lost a hold to Revoke.
func (m *Mutex) Unlock(who Owner) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != who {
		return m.notOwner(who)
	}
	m.depth--
	if m.depth == 0 {
		m.release()
	}
	return nil
}

// Leave releases one hold of who unless it is the last: then it changes
// nothing and reports last, and the caller finishes what the outermost hold
// guarded before calling Unlock or HandOff; until then m cannot be revoked.
// It returns ErrNotOwner if who does not own m, or ErrRevoked if it lost a
// hold to Revoke.
func (m *Mutex) Leave(who Owner) (last bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != who {
		return false, m.notOwner(who)
	}
	if m.depth == 1 {
		m.leaving = true
		return true, nil
	}
	m.depth--
	return false, nil
}

// HandOff passes m, held once by who, to the longest waiting owner and
// reports true. If nobody waits it changes nothing and reports false: who
// still owns m. It returns ErrNotOwner if who does not own m.
func (m *Mutex) HandOff(who Owner) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != who {
		return false, ErrNotOwner
	}
	if len(m.waiters) == 0 {
		return false, nil
	}
	m.release()
	return true, nil
}

// NextTag returns the tag of the owner that HandOff would hand m to
// now, and false if nobody waits.
func (m *Mutex) NextTag() (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiters) == 0 {
		return 0, false
	}
	return m.waiters[0].tag, true
}

// Owner returns the owner of m now, or the zero Owner if m is free: one
// atomic load, a snapshot that may be stale by the time it is used.
func (m *Mutex) Owner() Owner { return Owner(m.cur.Load()) }

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
	return m.owner != 0 || len(m.waiters) > 0
}

// Revoke takes m from its owner, if it has one that is not finishing its
// last hold (see Leave) and ok, called with m's internal lock held, agrees,
// and hands m to the longest-waiting owner, or frees it. The owner's
// holds are recorded: each of its later Leave or Unlock calls returns
// ErrRevoked. It is for an owner that will not unlock in time (a goroutine
// that exited holding m, or whose hold of what m guards expired). ok must
// not call m's methods.
func (m *Mutex) Revoke(ok func() bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner == 0 || m.leaving || !ok() {
		return false
	}
	if m.revoked == nil {
		m.revoked = make(map[Owner]int)
	}
	if m.revoked[m.owner] == 0 {
		m.nrev.Add(1)
	}
	m.revoked[m.owner] += m.depth
	m.release()
	return true
}

// AnyRevoked reports whether some owner has holds that Revoke took and
// that it has not yet unlocked: without a lock, so that the common case
// (none) costs one atomic load.
func (m *Mutex) AnyRevoked() bool { return m.nrev.Load() > 0 }

// Revoked reports whether who has holds that Revoke took and that it has
// not yet unlocked.
func (m *Mutex) Revoked(who Owner) bool {
	if m.nrev.Load() == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.revoked[who] > 0
}

// notOwner returns ErrRevoked, consuming one revoked hold, if who has one,
// else ErrNotOwner. mu must be held.
func (m *Mutex) notOwner(who Owner) error {
	n := m.revoked[who]
	switch {
	case n == 0:
		return ErrNotOwner
	case n == 1:
		delete(m.revoked, who)
		m.nrev.Add(-1)
	default:
		m.revoked[who] = n - 1
	}
	return ErrRevoked
}

// release hands m to the head of the queue or frees it. mu must be held.
func (m *Mutex) release() {
	m.leaving = false
	if len(m.waiters) == 0 {
		m.setOwner(0, 0)
		return
	}
	next := m.waiters[0]
	m.waiters[0] = nil
	m.waiters = m.waiters[1:]
	m.setOwner(next.who, 1)
	close(next.ready)
}

// remove deletes w from the queue. mu must be held.
func (m *Mutex) remove(w *waiter) {
	for i, x := range m.waiters {
		if x == w {
			copy(m.waiters[i:], m.waiters[i+1:])
			m.waiters[len(m.waiters)-1] = nil
			m.waiters = m.waiters[:len(m.waiters)-1]
			return
		}
	}
}
