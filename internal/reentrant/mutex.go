// Package reentrant provides a goroutine-owned, reentrant, FIFO mutex whose
// waits can be cancelled.
//
// Ownership belongs to a goroutine, identified by its runtime id
// (github.com/petermattis/goid: a few nanoseconds, no allocation, used by
// CockroachDB). The owner may acquire again; each acquisition needs a matching
// Unlock. Waiters queue in arrival order and ownership is handed directly to
// the head of the queue on the last Unlock, so a goroutine that just unlocked
// cannot barge ahead of one that has been waiting (no starvation, Jain
// fairness close to 1 under contention).
package reentrant

import (
	"context"
	"errors"
	"sync"

	"github.com/petermattis/goid"
)

// ErrNotOwner is returned by Unlock when the calling goroutine does not hold
// the mutex.
var ErrNotOwner = errors.New("reentrant: calling goroutine does not hold the mutex")

// ErrAborted is returned by Lock when its abort channel was closed first.
var ErrAborted = errors.New("reentrant: wait aborted")

// Mutex is a reentrant mutex owned by a goroutine. The zero value is an
// unlocked mutex. A Mutex must not be copied after first use.
type Mutex struct {
	// mu guards the following.
	mu      sync.Mutex
	owner   int64 // goroutine id of the owner, 0 when free
	depth   int   // hold count of the owner
	waiters []*waiter
}

// waiter is one goroutine queued in Lock. ready is closed by the goroutine
// that hands ownership over, after it set owner to gid under mu.
type waiter struct {
	gid   int64
	ready chan struct{}
}

// TryLock acquires m for the calling goroutine if it is free and nobody is
// queued, or re-enters it if the caller already owns it. reentered reports the
// second case. It never blocks.
func (m *Mutex) TryLock() (ok, reentered bool) {
	gid := goid.Get()
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.owner == gid:
		m.depth++
		return true, true
	case m.owner == 0 && len(m.waiters) == 0:
		m.owner, m.depth = gid, 1
		return true, false
	}
	return false, false
}

// How says how Lock acquired the mutex.
type How int

const (
	Fresh     How = iota // m was free
	Reentered            // the caller already owned m
	Queued               // the caller waited for m to be handed over
)

// Lock acquires m for the calling goroutine, re-entering it if the caller
// already owns it, and says how. It waits in FIFO order until m is handed
// over, ctx is done (ctx.Err() is returned) or abort is closed (ErrAborted).
// A wait that returns an error leaves nothing held. A wait whose ctx ends
// just as m is handed over succeeds and keeps m: the previous owner may have
// left the new one something to inherit (the registry's hold), which passing
// m on could strand. (x/sync's semaphore does the opposite: it gives such a
// late grant back and returns ctx.Err().)
func (m *Mutex) Lock(ctx context.Context, abort <-chan struct{}) (How, error) {
	gid := goid.Get()
	m.mu.Lock()
	switch {
	case m.owner == gid:
		m.depth++
		m.mu.Unlock()
		return Reentered, nil
	case m.owner == 0 && len(m.waiters) == 0:
		m.owner, m.depth = gid, 1
		m.mu.Unlock()
		return Fresh, nil
	}
	w := &waiter{gid: gid, ready: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()

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
	if m.owner == gid {
		// Ownership was handed over as we gave up: keep it. The caller may
		// inherit what the previous owner left for it, so passing it on
		// here could strand that.
		return Queued, nil
	}
	m.remove(w)
	return Queued, err
}

// Depth returns the hold count of the calling goroutine: 0 if it does not own m.
func (m *Mutex) Depth() int {
	gid := goid.Get()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != gid {
		return 0
	}
	return m.depth
}

// Unlock releases one hold of the calling goroutine. The last one hands m to
// the longest-waiting goroutine. It returns ErrNotOwner, and changes nothing,
// if the caller does not own m.
func (m *Mutex) Unlock() error {
	gid := goid.Get()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != gid {
		return ErrNotOwner
	}
	m.depth--
	if m.depth == 0 {
		m.release()
	}
	return nil
}

// Leave releases one hold of the calling goroutine unless it is the last:
// then it changes nothing and reports last, and the caller finishes what the
// outermost hold guarded before calling Unlock. It returns ErrNotOwner if the
// caller does not own m.
func (m *Mutex) Leave() (last bool, err error) {
	gid := goid.Get()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != gid {
		return false, ErrNotOwner
	}
	if m.depth == 1 {
		return true, nil
	}
	m.depth--
	return false, nil
}

// HandOff passes m, held once by the calling goroutine, to the longest
// waiting goroutine and reports true. If nobody waits it changes nothing and
// reports false: the caller still owns m. It returns ErrNotOwner if the
// caller does not own m.
func (m *Mutex) HandOff() (bool, error) {
	gid := goid.Get()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner != gid {
		return false, ErrNotOwner
	}
	if len(m.waiters) == 0 {
		return false, nil
	}
	m.release()
	return true, nil
}

// Waiters returns the number of goroutines queued in Lock.
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

// release hands m to the head of the queue or frees it. mu must be held.
func (m *Mutex) release() {
	if len(m.waiters) == 0 {
		m.owner, m.depth = 0, 0
		return
	}
	next := m.waiters[0]
	m.waiters[0] = nil
	m.waiters = m.waiters[1:]
	m.owner, m.depth = next.gid, 1
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
