package registry

import (
	"context"
	"strings"
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

// PubSubLock waiters sleep as SpinLock waiters do (pollDelay: until the
// holder's TTL runs out, at most idleBetweenTries), but are woken early by
// the message every release publishes. One subscriber connection per
// registry, started on the first wait, listens on
// PSUBSCRIBE registryKey-channel:* and wakes only the lock named by the
// message; within a process only the head of that lock's local queue waits
// in Redis, so a release costs one attempt per process.
//
// No wake-up is missed: the waiter empties its wake channel (registering
// interest) before each obtain attempt, so a release between the attempt and
// the wait leaves a signal in the channel. While the subscriber is down,
// messages can be lost: it wakes every waiter when it drops and again when it
// is back, and in between waiters poll at idleBetweenTries.

// prepareWait readies a PubSubLock waiter before an obtain attempt: stale
// wake-ups are dropped.
func (l *RedisLock) prepareWait() {
	if l.wake == nil {
		return
	}
	select {
	case <-l.wake:
	default:
	}
}

// listen starts the registry's subscriber, after a PubSubLock's first failed
// attempt: a registry that never waits never subscribes (and so does not
// receive every release of its registryKey). A release between that attempt
// and the subscription is not missed: once subscribed, the subscriber wakes
// every waiter.
func (l *RedisLock) listen() {
	if l.wake != nil {
		l.reg.startOnce(&l.reg.subStarted, l.reg.subscribeLoop)
	}
}

// signal wakes l's remote waiter, if any, without blocking.
func (l *RedisLock) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// wakeAll signals every cached lock.
func (r *Registry) wakeAll() {
	r.locks.Range(func(_, v any) bool {
		v.(*RedisLock).signal()
		return true
	})
}

// subscribeLoop keeps one subscription alive until Close, resubscribing with
// backoff when the connection drops.
func (r *Registry) subscribeLoop() {
	var bo backoff
	for {
		err := r.subscribe(&bo)
		r.wakeAll() // messages may have been lost: everyone re-checks
		if r.isClosed() {
			return
		}
		r.log.Warn("lockyard: pub/sub subscriber dropped, resubscribing; waiters poll meanwhile", "err", err)
		if r.sleep(r.bgCtx, bo.delay(), nil) != nil {
			return
		}
	}
}

// subscribe subscribes on one connection and dispatches messages until the
// connection fails or falls silent, or the registry is closed (which cancels
// bgCtx and so the receive).
func (r *Registry) subscribe(bo *backoff) error {
	ctx, cancel := r.bound(r.bgCtx)
	sub, err := r.client.PSubscribe(ctx, channelPattern(r.prefix))
	cancel()
	if err != nil {
		return err
	}
	defer sub.Close()
	bo.reset()
	r.wakeAll() // waiters that polled meanwhile switch to wake-ups
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
				if sub.Ping(r.bgCtx) != nil {
					return // the receive sees the broken connection
				}
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	chanPrefix := r.prefix + "-channel:" + r.prefix + ":"
	for {
		ctx, cancel := context.WithTimeout(r.bgCtx, subscriberDead)
		ch, err := sub.Receive(ctx)
		cancel()
		if err != nil {
			return err
		}
		if name, ok := strings.CutPrefix(ch, chanPrefix); ok {
			if v, ok := r.locks.Load(r.userKeyOf(name)); ok {
				v.(*RedisLock).signal()
			}
		}
	}
}
