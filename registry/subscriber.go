package registry

import (
	"context"
	"sync/atomic"
	"time"
)

// The subscriber PINGs its connection every subscriberPing and reconnects
// when nothing, message or pong, arrives for subscriberDead: a connection
// that died silently (a peer gone without a FIN, a blackholed route) is
// noticed within seconds instead of never. A pool read timeout shorter than
// subscriberPing makes the subscriber reconnect needlessly.
const (
	subscriberPing = time.Second
	subscriberDead = 3 * time.Second
)

// subscriber wakes PubSubLock waiters. They sleep as SpinLock waiters do
// (pollDelay: until the holder's TTL runs out, at most idleBetweenTries),
// but are woken early by the message every release publishes. One
// subscription per registry, started on the first failed attempt, listens
// on every release channel of the registry key and wakes only the lock
// named by the message; within a process only the head of that lock's
// local queue waits in Redis, so a release costs one attempt per process.
//
// No wake-up is missed: the waiter empties its wake channel (registering
// interest) before each obtain attempt, so a release between the attempt and
// the wait leaves a signal in the channel. While the subscription is down,
// messages can be lost: it wakes every waiter when it drops and again when it
// is back, and in between waiters poll at idleBetweenTries.
type subscriber struct {
	r       *Registry
	started atomic.Bool
}

// start starts the subscriber once: a registry that never waits never
// subscribes (and so does not receive every release of its registry key).
// A release between the failed attempt and the subscription is not
// missed: once subscribed, the subscriber wakes every waiter.
func (s *subscriber) start() { s.r.bg.startOnce(&s.started, s.loop) }

// loop keeps one subscription alive until Close, resubscribing with
// backoff when it drops.
func (s *subscriber) loop() {
	r := s.r
	var bo backoff
	for {
		err := s.session(&bo)
		s.wakeAll() // messages may have been lost: everyone re-checks
		if r.bg.isClosed() {
			return
		}
		r.log.Warn("lockyard: pub/sub subscriber dropped, resubscribing; waiters poll meanwhile", "err", err)
		if r.bg.sleep(r.bg.ctx, bo.delay(), nil) != nil {
			return
		}
	}
}

// session subscribes and dispatches messages until the subscription fails
// or falls silent, or the registry is closed (which cancels bg.ctx and so
// the receive).
func (s *subscriber) session(bo *backoff) error {
	r := s.r
	sub, err := r.exec.subscribe(r.bg.ctx, r.layout.ChannelPattern())
	if err != nil {
		return err
	}
	defer sub.Close()
	bo.reset()
	s.wakeAll() // waiters that polled meanwhile switch to wake-ups
	// The pinger sends while this goroutine receives, as Subscription
	// allows; it stops before the subscription is closed.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(subscriberPing)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if sub.Ping(r.bg.ctx) != nil {
					return // the receive sees the broken connection
				}
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	for {
		ctx, cancel := context.WithTimeout(r.bg.ctx, subscriberDead)
		ch, err := sub.Receive(ctx)
		cancel()
		if err != nil {
			return err
		}
		s.deliver(ch)
	}
}

// deliver wakes the waiters of the lock or semaphore that channel ch
// names, if cached.
func (s *subscriber) deliver(ch string) {
	r := s.r
	lk, ok := r.layout.LockKeyOfChannel(ch)
	if !ok {
		return
	}
	if name, ok := r.layout.UserKey(lk); ok {
		if e, ok := r.cache.peek(name); ok {
			e.signal(1)
		}
	}
}

// wakeAll makes every cached lock's and semaphore's waiters try at once:
// messages may have been lost.
func (s *subscriber) wakeAll() { s.r.cache.each(func(e cached) { e.signal(everyTurn) }) }

// everyTurn is a count of release messages that passes any waiter's turn.
const everyTurn = 1 << 30

// waker carries release notices to a PubSubLock's remote waiter; nil for
// a SpinLock, whose waiters only poll. n counts every release message of
// the lock; a waiter behind others in the queue waits for several (as many
// as the queue says: lua/obtain.lua), and want says how many: the
// subscriber wakes the waiter (ch, buffered: a notice sent before the wait
// is kept) only once n reaches it, so that a release wakes the goroutine of
// the waiter whose turn it is, not those of every waiter.
type waker struct {
	n, want atomic.Int64
	ch      chan struct{}
}

func newWaker(t LockType) *waker {
	if t == PubSubLock {
		return &waker{ch: make(chan struct{}, 1)}
	}
	return nil
}

// mark returns the count of messages so far, and drops a stale notice. A
// waiter marks before each obtain attempt, so that a release between the
// attempt and its wait is counted, not missed.
func (w *waker) mark() int64 {
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
func (w *waker) expect(want int64) bool {
	if w == nil {
		return false
	}
	w.want.Store(want)
	return w.n.Load() >= want
}

// reached reports whether the count has reached want.
func (w *waker) reached(want int64) bool { return w != nil && w.n.Load() >= want }

// signal counts k messages and, if that is the count the waiter waits for,
// wakes it, without blocking.
func (w *waker) signal(k int64) {
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

// poke wakes the waiter without counting a message (a semaphore's head:
// a permit was handed off; its wait checks for it).
func (w *waker) poke() {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// notices returns the channel the waiter sleeps on (nil, which never
// yields, for a SpinLock).
func (w *waker) notices() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.ch
}

// listen starts the subscriber after a failed attempt of a lock whose
// waiter it wakes (a PubSubLock).
func (s *subscriber) listen(w *waker) {
	if w != nil {
		s.start()
	}
}
