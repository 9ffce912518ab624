package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// The subscriber PINGs its connection every subscriberPing and reconnects
// when nothing, message or pong, arrives for subscriberDead: a connection
// that died silently (a peer gone without a FIN, a blackholed route) is
// noticed within seconds instead of never. On a redigo pool the subscriber
// reads with that bound (boundedReceiver), not the pool's read timeout;
// with another Client, a read timeout shorter than subscriberPing makes it
// reconnect needlessly.
const (
	subscriberPing = time.Second
	subscriberDead = 3 * time.Second
)

// subscriber wakes PubSubLock waiters. They sleep as SpinLock waiters do
// (pollDelay: until the holder's TTL runs out, at most idleBetweenTries),
// but are woken early by messages. A registry has two subscriptions, each
// started on the first failed attempt that needs it: one listens on every
// release channel of the registry key and wakes only the lock named by the
// message (newReleaseSubscriber); the other listens on the registry's own
// turn channels, where a semaphore's scripts tell it that its turn at a
// permit has come (newTurnSubscriber), so that a turn wakes one process,
// not every one that waits. Within a process only the head of a lock's or
// semaphore's local queue waits in Redis, so a release costs one attempt
// per process told.
//
// No wake-up is missed: the waiter empties its wake channel (registering
// interest) before each obtain attempt, so a message between the attempt
// and the wait leaves a signal in the channel. While a subscription is
// down, messages can be lost: it wakes every waiter when it drops and again
// when it is back, and in between waiters poll at idleBetweenTries.
type subscriber struct {
	c       *core.Core
	cache   *cache
	layout  wire.Layout
	retry   time.Duration // how soon it asks again after the server refused it (config.refusedRetry)
	started atomic.Bool
	pattern string // what it subscribes to
	// wide, if set, is what it subscribes to instead when the server
	// refuses pattern (NOPERM): an ACL can allow a PSUBSCRIBE pattern only
	// literally, and so cannot allow the turn pattern of a registry id it
	// does not know. lockKey filters what it hears.
	wide    string
	lockKey func(ch string) (lk string, ok bool) // the lock key that channel ch names, if it is for this registry
	wakes   wakeup                               // the waiters it wakes: those woken by the messages it hears
	// grant, if set, hands a permit that a semaphore's script granted to
	// the waiter that channel ch names (the turn subscriber's).
	grant func(ch string)
	// own is set while it subscribes to pattern (not wide): the turn
	// subscriber then hears its registry's grants alone, and its
	// semaphores' waiters ask for them (semgrant.go).
	own atomic.Bool
	// watch, if set, are the waiters on several keys that it wakes too
	// (the release subscriber's: AcquireAll).
	watch *watchers
	// refused is set while the server refuses both pattern and wide: the
	// waiters it would wake queue as pollers meanwhile (a listener that
	// hears nothing would be given turns it misses).
	refused    atomic.Bool
	wideLogged bool // the switch to wide was logged (owned by loop)
	// up is set while a subscription is taken, once the waiters it may
	// have missed messages for were woken (a test's view: export_test.go).
	up atomic.Bool
	// keys, if set, are the keys that the release subscriber subscribes
	// to, by channel, instead of pattern (keysub.go); x is then its Client.
	keys *keySubs
	x    *core.ClientExec
	// byKey is set while it subscribes by key: until the server refuses
	// SUBSCRIBE (an ACL without it), when it subscribes to the pattern
	// from then on.
	byKey atomic.Bool
}

// newReleaseSubscriber returns r's subscriber to release messages, which
// wake locks (a semaphore hears turn messages only).
func newReleaseSubscriber(c *core.Core, cache *cache, watch *watchers, layout wire.Layout, cfg *config) *subscriber {
	s := &subscriber{c: c, cache: cache, watch: watch, layout: layout, retry: cfg.refusedRetry,
		pattern: layout.ChannelPattern(), lockKey: layout.LockKeyOfChannel, wakes: byRelease}
	if x, ok := c.Exec.(*core.ClientExec); ok && x.CanSubscribeChannels() {
		s.keys, s.x = newKeySubs(cfg.idle, cfg.ackTimeout), x
		s.byKey.Store(true)
	}
	return s
}

// newTurnSubscriber returns r's subscriber to its semaphore turns.
//
// granted is told of each grant (semgrant.go).
func newTurnSubscriber(c *core.Core, cache *cache, layout wire.Layout, cfg *config, granted func(wire.Grant)) *subscriber {
	id := c.ClientID
	return &subscriber{c: c, cache: cache, layout: layout, retry: cfg.refusedRetry,
		pattern: layout.TurnPattern(id), wide: layout.AllTurnsPattern(),
		lockKey: func(ch string) (string, bool) { return layout.LockKeyOfTurnChannel(id, ch) },
		grant: func(ch string) {
			if g, ok := layout.GrantOfChannel(id, ch); ok && granted != nil {
				granted(g)
			}
		},
		wakes: byTurn}
}

// start starts the subscriber once: a registry that never waits never
// subscribes (and so does not receive every release of its registry key).
// A release between the failed attempt and the subscription is not
// missed: once subscribed, the subscriber wakes every waiter.
func (s *subscriber) start() { s.c.BG.StartOnce(&s.started, s.loop) }

// loop keeps one subscription alive until Close, resubscribing with
// backoff when it drops.
func (s *subscriber) loop() {
	var bo core.Backoff
	pattern := s.pattern
	for {
		var (
			subscribed bool
			err        error
		)
		byKey := s.byKey.Load()
		if byKey {
			subscribed, err = s.keySession(&bo, s.x)
		} else {
			subscribed, err = s.session(&bo, pattern)
		}
		s.wakeAll() // messages may have been lost: everyone re-checks
		if s.c.BG.IsClosed() {
			return
		}
		if byKey && core.IsNoPerm(err) {
			// An ACL that allows PSUBSCRIBE alone (as docs/SECURITY.md
			// gave before the subscriber by key): the pattern from now on.
			s.byKey.Store(false)
			s.keys.forget()
			s.c.Log.Info("lockyard: the server refused SUBSCRIBE; the registry subscribes to every key's release channel instead (see docs/SECURITY.md)",
				"pattern", pattern, "err", err)
			continue
		}
		if !subscribed && s.wide != "" && core.IsNoPerm(err) {
			var ok bool
			if pattern, ok = s.refusedOn(pattern, err); !ok {
				return
			}
			continue
		}
		on := pattern
		if byKey {
			on = "the release channels of the keys waited for"
		}
		s.c.Log.Warn("lockyard: pub/sub subscriber dropped, resubscribing; waiters poll meanwhile", "pattern", on, "err", err)
		pattern = s.pattern // each new subscription tries the registry's own first
		if s.c.BG.Sleep(s.c.BG.Ctx, bo.Delay(), nil) != nil {
			return
		}
	}
}

// refusedOn deals with the server's refusal (NOPERM, err) of pattern, and
// returns what to subscribe to next, at once: wide after the registry's own
// pattern; after wide, the registry's own again, once refusedRetry has
// passed, meanwhile marking the subscriber refused (its semaphore waiters
// queue as pollers). ok is false when the registry was closed meanwhile.
func (s *subscriber) refusedOn(pattern string, err error) (next string, ok bool) {
	if pattern != s.wide {
		if !s.wideLogged {
			s.wideLogged = true
			s.c.Log.Info("lockyard: the server refused the registry's own turn channels; subscribing to every registry's (see docs/SECURITY.md)",
				"pattern", pattern, "err", err)
		}
		return s.wide, true
	}
	// Refused both: an ACL without the turn channels. Semaphore waiters
	// poll; ask again now and then (the ACL may be fixed, or have been
	// changed in two steps).
	if !s.refused.Swap(true) {
		s.c.Log.Error("lockyard: the server refused the semaphore turn channels; semaphore waiters poll (idleBetweenTries) until an ACL allows them (see docs/SECURITY.md)",
			"pattern", pattern, "allow", "&"+s.wide, "err", err)
		s.wakeAll() // those woken before refused was set queued as listeners
	}
	return s.pattern, s.c.BG.Sleep(s.c.BG.Ctx, s.retry, nil) == nil
}

// session subscribes to pattern and dispatches messages until the
// subscription fails or falls silent, or the registry is closed (serve).
// subscribed reports whether the server took the subscription.
func (s *subscriber) session(bo *core.Backoff, pattern string) (subscribed bool, err error) {
	sub, err := s.c.Exec.Subscribe(s.c.BG.Ctx, pattern)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	bo.Reset()
	s.refused.Store(false)
	s.own.Store(pattern == s.pattern)
	defer s.own.Store(false)
	s.wakeAll() // waiters that polled meanwhile switch to wake-ups
	return true, s.serve(sub, sender{tick: func() error { return sub.Ping(s.c.BG.Ctx) }})
}

// boundedReceiver is a Subscription that can receive in the calling
// goroutine, bounded by a duration rather than by a context (poolSub, on a
// connection that can: canReceiveWithin), so that a message costs no
// goroutine, context or timer of its own. What a context's end did to a
// receive, abort does from another goroutine: it breaks the connection,
// without a command or a read, and the receive returns an error. (A Close of
// the subscription would drain it, reading concurrently with the receive,
// and for as long as the server takes to answer.)
type boundedReceiver interface {
	canReceiveWithin() bool
	receiveWithin(d time.Duration) (channel string, err error)
	abort()
}

// sender is what a session sends besides receiving: every subscriberPing,
// tick (a PING, and what goes with it); on each kick, onKick. onPong, if
// set, is told of each pong received.
type sender struct {
	tick   func() error
	kick   <-chan struct{} // nil: never
	onKick func() error
	onPong func()
}

// serve dispatches sub's messages until the subscription fails or falls
// silent, or the registry is closed (which cancels bg.ctx and so the
// receive, or aborts a bounded one: boundedReceiver). Its sender goroutine
// does every send of h, one at a time, while this goroutine receives, as
// Subscription allows; it stops before serve returns, and so before the
// subscription is closed.
func (s *subscriber) serve(sub core.Subscription, h sender) error {
	s.up.Store(true)
	defer s.up.Store(false)
	br, bounded := sub.(boundedReceiver)
	bounded = bounded && br.canReceiveWithin()
	stop, stopped := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 1) // a send's error, which ended the session
	go func() {
		defer close(stopped)
		t := time.NewTicker(subscriberPing)
		defer t.Stop()
		var closing <-chan struct{} // a bounded receive is aborted when the registry closes
		if bounded {
			closing = s.c.BG.Closed
		}
		for {
			var err error
			select {
			case <-stop:
				return
			case <-h.kick:
				err = h.onKick()
			case <-t.C:
				err = h.tick()
			case <-closing:
				br.abort()
				return
			}
			if err != nil {
				// A send failed: the receive ends too, and the session
				// with it.
				failed <- err
				if bounded {
					br.abort()
				} else {
					_ = sub.Close()
				}
				return
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	for {
		var (
			ch  string
			err error
		)
		if bounded {
			ch, err = br.receiveWithin(subscriberDead)
		} else {
			ctx, cancel := context.WithTimeout(s.c.BG.Ctx, subscriberDead)
			ch, err = sub.Receive(ctx)
			cancel()
		}
		switch {
		case err != nil:
			select {
			case err = <-failed: // what ended the receive
			default:
			}
			return err
		case bounded && s.c.BG.IsClosed(): // a message before the abort
			return core.ErrClosed
		case ch != "":
			s.deliver(ch)
		case h.onPong != nil:
			h.onPong()
		}
	}
}

// deliver wakes the waiters of the lock or semaphore that channel ch
// names, if cached: one message counted.
func (s *subscriber) deliver(ch string) {
	if lk, ok := s.lockKey(ch); ok {
		s.signalKey(lk, 1)
	} else if s.grant != nil {
		s.grant(ch)
	}
}

// wakeAll makes the waiters of every cached lock and semaphore that s
// wakes try at once: messages may have been lost.
func (s *subscriber) wakeAll() {
	s.cache.each(func(e cached) {
		if e.wokenBy() == s.wakes {
			e.signal(core.EveryTurn)
		}
	})
	if s.watch != nil {
		s.watch.all()
	}
}

// Listen starts the subscriber after a failed attempt of a lock or
// semaphore whose waiter it wakes (w: nil for a SpinLock's, which polls):
// core.Listener.
func (s *subscriber) Listen(w *core.Waker) {
	if w != nil {
		s.start()
	}
}
