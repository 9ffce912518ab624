package core

import "sync/atomic"

// EveryTurn is a count of release messages that passes any waiter's turn.
const EveryTurn = 1 << 30

// Waker carries release notices to a PubSubLock's remote waiter; nil for
// a SpinLock, whose waiters only poll. n counts every release message of
// the lock; a waiter behind others in the queue waits for several (as many
// as the queue says: lua/obtain.lua), and want says how many: the
// subscriber wakes the waiter (ch, buffered: a notice sent before the wait
// is kept) only once n reaches it, so that a release wakes the goroutine of
// the waiter whose turn it is, not those of every waiter.
type Waker struct {
	n, want atomic.Int64
	ch      chan struct{}
}

// NewWaker returns the waker of a PubSubLock's waiter (pubsub), or nil.
func NewWaker(pubsub bool) *Waker {
	if pubsub {
		return &Waker{ch: make(chan struct{}, 1)}
	}
	return nil
}

// Mark returns the count of messages so far, and drops a stale notice. A
// waiter marks before each obtain attempt, so that a release between the
// attempt and its wait is counted, not missed.
func (w *Waker) Mark() int64 {
	if w == nil {
		return 0
	}
	select {
	case <-w.ch:
	default:
	}
	return w.n.Load()
}

// expect sets the count at which the waiter wants to be woken, and reports
// whether it has been reached already.
func (w *Waker) expect(want int64) bool {
	if w == nil {
		return false
	}
	w.want.Store(want)
	return w.n.Load() >= want
}

// reached reports whether the count has reached want.
func (w *Waker) reached(want int64) bool { return w != nil && w.n.Load() >= want }

// Signal counts k messages and, if that is the count the waiter waits for,
// wakes it, without blocking.
func (w *Waker) Signal(k int64) {
	if w == nil {
		return
	}
	if w.n.Add(k) < w.want.Load() {
		return
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// Poke wakes the waiter without counting a message (a semaphore's head:
// a permit was handed off; its wait checks for it).
func (w *Waker) Poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// notices returns the channel the waiter sleeps on (nil, which never
// yields, for a SpinLock).
func (w *Waker) notices() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.ch
}
