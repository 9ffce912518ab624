package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
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
func (s *subscriber) start() { s.r.core.BG.StartOnce(&s.started, s.loop) }

// loop keeps one subscription alive until Close, resubscribing with
// backoff when it drops.
func (s *subscriber) loop() {
	r := s.r
	var bo core.Backoff
	for {
		err := s.session(&bo)
		s.wakeAll() // messages may have been lost: everyone re-checks
		if r.core.BG.IsClosed() {
			return
		}
		r.core.Log.Warn("lockyard: pub/sub subscriber dropped, resubscribing; waiters poll meanwhile", "err", err)
		if r.core.BG.Sleep(r.core.BG.Ctx, bo.Delay(), nil) != nil {
			return
		}
	}
}

// session subscribes and dispatches messages until the subscription fails
// or falls silent, or the registry is closed (which cancels bg.ctx and so
// the receive).
func (s *subscriber) session(bo *core.Backoff) error {
	r := s.r
	sub, err := r.core.Exec.Subscribe(r.core.BG.Ctx, r.layout.ChannelPattern())
	if err != nil {
		return err
	}
	defer sub.Close()
	bo.Reset()
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
				if sub.Ping(r.core.BG.Ctx) != nil {
					return // the receive sees the broken connection
				}
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	for {
		ctx, cancel := context.WithTimeout(r.core.BG.Ctx, subscriberDead)
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
func (s *subscriber) wakeAll() { s.r.cache.each(func(e cached) { e.signal(core.EveryTurn) }) }

// listen starts the subscriber after a failed attempt of a lock whose
// waiter it wakes (a PubSubLock).
func (s *subscriber) listen(w *core.Waker) {
	if w != nil {
		s.start()
	}
}
