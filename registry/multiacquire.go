package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// multiGather is how long a multi-key waiter keeps the turns of the keys
// it could take, after the last attempt at which it gained a key (fewer
// blocked it than before): a few turns' worth. Single-key lockers that
// keep its keys busy in turn free each within that time of the others, so
// it gathers them all; a key held for long does not keep the others idle
// for it beyond that: it lets their turns go, keeps its place in their
// lines, and gathers again once the key it waits for frees.
const multiGather = 4 * turnWindow

// multiPatience is how long a multi-key waiter takes what it finds free
// before it gathers: until then it keeps no turn of a key it could take
// (it passes them on, and stays in line, not due), and tries whenever a
// key it waits for frees, as a caller that only retries would, without
// idling a key for others. A waiter that waited longer gathers, and,
// among the waiters of its keys, the oldest is first in every line.
const multiPatience = 100 * time.Millisecond

// obtain takes every key of m, in the engine's waiting loop (core.Acquire)
// when waits, else in one attempt; it installs the hold on success. On
// failure nothing is held: groups already taken are given back, and the
// waiter leaves every line.
func (m *multiLock) obtain(ctx context.Context, ttl time.Duration, waits bool) (waited bool, err error) {
	r := m.eng
	r.labels.publish(ctx) // once, before the registry's first attempt
	m.token = r.core.NewToken()
	m.fences = make([]int64, len(m.lks))
	m.waiter.Renew(&r.core)
	m.group()
	start := r.core.Now()
	taken := 0     // the groups taken, in order
	dirty := false // an attempt may have left keys taken or the waiter queued
	queued := false
	var rtt time.Duration
	attempt := func(ctx context.Context, first bool, mark int64) (core.Turn, error) {
		for taken < len(m.groups) {
			g := m.groups[taken]
			now := r.core.Now()
			// A patient waiter is in no line; past multiPatience it queues.
			line := waits && now-start >= int64(multiPatience)
			if line && !queued {
				queued, dirty = true, true
				m.gather = now + int64(multiGather)
			}
			h := hint{waits: line, waiter: m.waiter.ID(), spread: rand.N(r.cfg.idle/4 + 1), rtt: rtt}
			base := m.unwatch()
			g2, err := m.proto.acquire(ctx, m.keysOf(g), m.token, ttl, h, line && now < m.gather)
			switch {
			case isCrossSlot(err) && len(m.groups) == 1 && taken == 0:
				m.proto.cluster.Store(true) // a Cluster: by slot from now on
				if m.group(); len(m.groups) > 1 {
					continue
				}
			case err != nil:
				if core.IsAmbiguous(err) {
					dirty = true
				}
				return core.Turn{}, m.wrongKind(g, err)
			case !g2.ok:
				rtt = time.Duration(r.core.Now() - now)
				if g2.blocked < m.blocked {
					m.gather = r.core.Now() + int64(multiGather) // it gained a key: gather
				}
				m.blocked = g2.blocked
				switch {
				case m.wake == nil:
				case line && len(g2.afters) == len(g):
					m.watchFor(g, g2.afters, base)
					return core.Turn{Sleep: g2.sleep, After: 1}, nil
				case !line && len(g2.afters) == len(g):
					m.watchAll(g, g2.afters, base)
					return core.Turn{Sleep: g2.sleep, After: 1}, nil
				}
				return core.Turn{Sleep: g2.sleep, After: g2.after}, nil
			}
			for i, k := range g {
				m.fences[k] = g2.fences[i]
			}
			taken++
			m.blocked = 0
			first = true // the next group's first attempt
		}
		return core.Turn{OK: true}, nil
	}
	sent := r.core.Now()
	if waits && m.wake != nil {
		r.watch.add(m.names, m.counts)
		defer r.watch.remove(m.names, m.counts)
	}
	if waits {
		w := core.Waiting{Key: m.desc, Verb: "obtaining", Retrying: "lockyard: multi-key obtain failed, retrying", Idle: r.cfg.idle, Wake: m.wake}
		if m.wake != nil {
			w.Listener = r.subscriber
		}
		waited, err = r.core.Acquire(ctx, &w, true, func(ctx context.Context, first bool, mark int64) (core.Turn, error) {
			sent = r.core.Now()
			return attempt(ctx, first, mark)
		})
	} else {
		var t core.Turn
		t, err = attempt(ctx, true, 0)
		switch {
		case err == nil && !t.OK:
			err = fmt.Errorf("%w: %s", ErrNotObtained, m.desc)
		case err != nil:
			err = core.WrapKey("trying", m.desc, err)
		}
	}
	if err == nil {
		deadline := core.ValidUntil(sent, ttl)
		if r.core.Now() < deadline {
			m.h = core.NewHold(&r.core, m.lks[0], m.token, m.fences[0], ttl, deadline, m, m)
			r.core.Watchdog.Track(m.h)
			return waited, nil
		}
		err = fmt.Errorf("%w: %s: the reply came after the keys' validity", ErrNotObtained, m.desc)
	}
	if dirty || taken > 0 {
		m.giveBack()
	}
	return waited, err
}

// keyWake counts the release messages of one of a multi-key waiter's
// keys, and wakes the waiter (parent) when its turn at that key may have
// come (a queued waiter: once the count reaches want), or when every key
// that a holder kept from it has had a message since its last attempt (a
// patient one: armed, counted down in pending).
type keyWake struct {
	n, want atomic.Int64
	armed   atomic.Bool
	pending *atomic.Int32 // the waiter's armed keys that had no message yet
	parent  *core.Waker
}

func (k *keyWake) Signal(d int64) {
	n := k.n.Add(d)
	if w := k.want.Load(); d >= core.EveryTurn || w > 0 && n >= w {
		k.parent.Signal(1)
	}
	if k.armed.CompareAndSwap(true, false) && k.pending.Add(-1) == 0 {
		k.parent.Signal(1)
	}
}

// unwatch stops waking the waiter for any key's messages, before an
// attempt, and returns each key's count so far.
func (m *multiLock) unwatch() []int64 {
	base := make([]int64, len(m.lks))
	for i, k := range m.keys {
		k.want.Store(0)
		k.armed.Store(false)
		base[i] = k.n.Load()
	}
	return base
}

// watchFor wakes the waiter once key g[i] has had afters[i] messages
// since base (unwatch), for each key it waits for.
func (m *multiLock) watchFor(g []int, afters, base []int64) {
	for i, k := range g {
		if a := afters[i]; a > 0 {
			kw := m.keys[k]
			kw.want.Store(base[k] + a)
			if kw.n.Load() >= base[k]+a {
				m.wake.Signal(1)
			}
		}
	}
}

// watchAll wakes the waiter once each key g[i] with held[i] set has had a
// message since base (unwatch): every holder that kept it out has let go.
func (m *multiLock) watchAll(g []int, held, base []int64) {
	m.pending.Store(0)
	for i, k := range g {
		if held[i] == 0 {
			continue
		}
		kw := m.keys[k]
		m.pending.Add(1)
		kw.armed.Store(true)
		if kw.n.Load() > base[k] && kw.armed.CompareAndSwap(true, false) {
			m.pending.Add(-1) // a message came meanwhile
		}
	}
	if m.pending.Load() <= 0 {
		m.wake.Signal(1)
	}
}

// giveBack frees, in the background, whatever a failed acquisition may
// have left: the keys that the token holds, and the waiter's place in
// every line.
func (m *multiLock) giveBack() {
	r := m.eng
	id := m.waiter.Renew(&r.core)
	groups := m.groups
	r.soon(func(ctx context.Context) {
		for _, g := range groups {
			lks := m.keysOf(g)
			_, _, _ = r.core.Retried(ctx, func(ctx context.Context) (bool, error) {
				_, err := m.proto.release(ctx, lks, m.token)
				return err == nil, err
			})
			if err := m.proto.leave(ctx, lks, id); err != nil {
				r.core.Log.Debug("lockyard: leaving the wait queues failed; the entries lapse", "keys", m.desc, "err", err)
			}
		}
	})
}

// wrongKind names the key of g that a WRONGTYPE reply is about
// ("lock key #I, ..."), as an error that matches ErrWrongKind.
func (m *multiLock) wrongKind(g []int, err error) error {
	if !core.IsWrongType(err) {
		return err
	}
	key := "one of the keys"
	if _, rest, ok := strings.Cut(err.Error(), "lock key #"); ok {
		num, _, _ := strings.Cut(rest, ",")
		if i, e := strconv.Atoi(num); e == nil && i >= 1 && i <= len(g) {
			key = strconv.Quote(m.lks[g[i-1]])
		}
	}
	return fmt.Errorf("%s: %w", key, wrongKind(kindLock, err))
}
