package registry

import (
	"errors"
	"sync"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The release subscriber by key. When the Client can subscribe to channels
// (core.ChannelSubscriber), the release subscriber subscribes to the
// release channels of the keys that its waiters wait for, not to the
// pattern of every key: a release is delivered to the processes that wait
// for that key, not to every process that ever waited (with 5 registries
// listening to every release, 4 single-key lockers kept 0.74 of their
// throughput alone; bench/multi, starve).
//
// A waiter asks for its keys after each refused attempt (want, through its
// Listener). A key not subscribed yet is subscribed by the session's sender
// goroutine, followed by a PING; its pong says the server has taken the
// SUBSCRIBE, and the waiters of the key are then woken once (EveryTurn): a
// release between their attempt and the subscription is not missed. A key
// that no waiter asked for during linger (twice the poll interval, a
// second, and WithReplicaAck's timeout: a waiter asks again after each
// attempt, and sleeps at most a poll interval in between) is
// unsubscribed at the next ping. The session always keeps the registry's
// idle channel (layout.Channel(""), on which no release is published), so
// that its connection stays in pub/sub mode with no key subscribed.

// keySubs are the keys of the release subscriber by key.
type keySubs struct {
	linger time.Duration
	kick   chan struct{} // a key was asked for that the session does not have (cap 1)
	mu     sync.Mutex
	wanted map[string]int64 // lock key -> when (core.Now) a waiter last asked for it
	on     map[string]bool  // lock key -> subscribed on the live session (SUBSCRIBE sent)
}

// newKeySubs returns the keys of a registry whose waiters poll every idle
// and whose refused attempts may wait attempt for replicas (WithReplicaAck:
// its WAIT follows every obtain). An attempt slower than that (a slow
// server) may see its key let go and taken again, and its waiters woken
// once more: a cost, not a missed release.
func newKeySubs(idle, attempt time.Duration) *keySubs {
	return &keySubs{linger: 2*idle + subscriberPing + attempt, kick: make(chan struct{}, 1),
		wanted: make(map[string]int64), on: make(map[string]bool)}
}

// forget drops every key: the subscriber no longer subscribes by key.
func (k *keySubs) forget() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.wanted)
	clear(k.on)
}

// keyListener is the core.Listener of a waiter on the lock keys lks: it
// asks the release subscriber for their messages.
type keyListener struct {
	s   *subscriber
	lks []string
}

func (l keyListener) Listen(w *core.Waker) {
	if w != nil {
		l.s.want(l.lks...)
	}
}

// listener returns the core.Listener of a waiter on the lock keys lks.
func (s *subscriber) listener(lks ...string) core.Listener {
	if s.keys == nil {
		return s
	}
	return keyListener{s, lks}
}

// want asks for the release messages of the lock keys lks, for a waiter
// that waits for them, and starts the subscriber.
func (s *subscriber) want(lks ...string) {
	k := s.keys
	if k == nil || !s.byKey.Load() {
		s.start()
		return
	}
	now, missing := s.c.Now(), false
	k.mu.Lock()
	for _, lk := range lks {
		k.wanted[lk] = now
		missing = missing || !k.on[lk]
	}
	k.mu.Unlock()
	s.start()
	if missing {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

// begin returns the channels of a new session: the idle channel and those
// of the keys asked for within linger, now all on it.
func (k *keySubs) begin(s *subscriber) []string {
	now := s.c.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.on)
	chs := []string{s.layout.Channel("")}
	for lk, at := range k.wanted {
		if now-at > int64(k.linger) {
			delete(k.wanted, lk)
			continue
		}
		k.on[lk] = true
		chs = append(chs, s.layout.Channel(lk))
	}
	return chs
}

// added returns the keys asked for that the session does not have, now
// on it.
func (k *keySubs) added() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var lks []string
	for lk := range k.wanted {
		if !k.on[lk] {
			k.on[lk] = true
			lks = append(lks, lk)
		}
	}
	return lks
}

// stale returns the keys that no waiter asked for within linger, now
// forgotten and off the session.
func (k *keySubs) stale(now int64) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var lks []string
	for lk, at := range k.wanted {
		if now-at > int64(k.linger) {
			delete(k.wanted, lk)
			if k.on[lk] {
				delete(k.on, lk)
				lks = append(lks, lk)
			}
		}
	}
	return lks
}

// channels returns the release channels of lks.
func (s *subscriber) channels(lks []string) []string {
	chs := make([]string, len(lks))
	for i, lk := range lks {
		chs[i] = s.layout.Channel(lk)
	}
	return chs
}

// keySession is session for the subscriber by key: it subscribes to the
// keys asked for, and dispatches messages until the subscription fails or
// falls silent, or the registry is closed. The sender goroutine (serve)
// sends every SUBSCRIBE, UNSUBSCRIBE and PING, so that the pongs, in the
// order of the pings, say which SUBSCRIBEs the server has taken (pending).
func (s *subscriber) keySession(bo *core.Backoff, x *core.ClientExec) (subscribed bool, err error) {
	k := s.keys
	sub, _, err := x.SubscribeChannels(s.c.BG.Ctx, k.begin(s)...)
	if err == nil && sub == nil {
		err = errors.New("lockyard: the Client's SubscribeChannels returned no subscription")
	}
	if err != nil {
		return false, err
	}
	defer sub.Close()
	bo.Reset()
	s.wakeAll() // waiters that polled meanwhile switch to wake-ups
	var (
		pmu     sync.Mutex
		pending [][]string // per PING sent and not answered: the keys subscribed just before it
	)
	ping := func(lks []string) error {
		pmu.Lock()
		pending = append(pending, lks)
		pmu.Unlock()
		return sub.Ping(s.c.BG.Ctx)
	}
	return true, s.serve(sub, sender{
		tick: func() error {
			if lks := k.stale(s.c.Now()); len(lks) > 0 {
				if err := sub.Unsubscribe(s.c.BG.Ctx, s.channels(lks)...); err != nil {
					return err
				}
			}
			return ping(nil)
		},
		kick: k.kick,
		onKick: func() error {
			lks := k.added()
			if len(lks) == 0 {
				return nil
			}
			if err := sub.Subscribe(s.c.BG.Ctx, s.channels(lks)...); err != nil {
				return err
			}
			return ping(lks)
		},
		onPong: func() {
			pmu.Lock()
			var lks []string
			if len(pending) > 0 {
				lks, pending = pending[0], pending[1:]
			}
			pmu.Unlock()
			for _, lk := range lks { // subscribed now: a message before it may have been missed
				s.signalKey(lk, core.EveryTurn)
			}
		},
	})
}

// signalKey counts n release messages of the lock key lk for its waiters.
func (s *subscriber) signalKey(lk string, n int64) {
	if name, ok := s.layout.UserKey(lk); ok {
		if e, ok := s.cache.peek(name); ok {
			e.signal(n)
		}
		if s.watch != nil {
			s.watch.signal(name, n)
		}
	}
}
