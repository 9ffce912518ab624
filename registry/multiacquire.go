package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// multiGather is how long a queued multi-key waiter first gathers: keeps
// the turns of the keys it could take, and is given those of the others as
// they free, so that it can take them all at once. Single-key lockers that
// keep its keys busy in turn free each within that time of the others, so
// it gathers them all. A key held for longer does not keep the others idle
// for it beyond that: it lets their turns go for as long (it rests, keeping
// its place in their lines), then gathers for twice as long, and so on up
// to multiGatherMost: a key is kept idle for it at most that long at a
// time, and holders whose sections are shorter cannot starve it.
const multiGather = 4 * turnWindow

// multiGatherMost bounds a gathering waiter's time, which doubles each
// time it gathered in vain.
const multiGatherMost = time.Second

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
	gatherFor, gathering, gatheredOnce := multiGather, false, false
	longest := -1                          // the key (index of m.lks) that kept it out longest
	blockedAt := make([]int64, len(m.lks)) // since when each key kept it out, 0: it does not
	var (
		rtt   time.Duration
		place string // its place in line, kept when a line drops it
		sent  int64  // when the last group's attempt was sent
		// renewed: when the groups taken were last renewed, or the first
		// was sent for.
		renewed int64
	)
	// restart gives back what the attempts took, after one of the groups
	// taken was lost (or its renewal failed with err), and starts over with
	// a new token.
	restart := func(err error) (core.Turn, error) {
		dirty, taken = true, 0
		m.giveBack()
		m.token = r.core.NewToken() // what giveBack frees is the old token's
		if err != nil {
			return core.Turn{}, err
		}
		return core.Turn{Sleep: 0, After: -1}, nil
	}
	attempt := func(ctx context.Context, _ bool, _ int64) (core.Turn, error) {
		for taken < len(m.groups) {
			g := m.groups[taken]
			now := r.core.Now()
			// A patient waiter is in no line; past multiPatience it queues,
			// and gathers and rests in turn.
			patience := int64(multiPatience) - (now - start)
			line := waits && patience <= 0
			if line && !queued {
				queued, dirty = true, true
			}
			if gathering && now >= m.gather {
				// It gathered in vain (a key was held longer than that): it
				// lets the keys go until the key that kept it out longest
				// frees, then gathers for twice as long, so that holders
				// that keep its keys busy in turn cannot starve it, and a
				// key held long does not idle the others.
				gathering, gatherFor = false, min(2*gatherFor, multiGatherMost)
			}
			var gather any = 0
			switch {
			case line && !gatheredOnce:
				gathering, gatheredOnce, m.gather = true, true, now+int64(gatherFor)
				gather = 1
			case gathering:
				gather = 1
			case line && longest >= 0:
				gather = "#" + strconv.Itoa(slices.Index(g, longest)+1)
			}
			h := hint{waits: line, waiter: m.waiter.ID(), spread: rand.N(r.cfg.idle/4 + 1), rtt: rtt}
			base := m.unwatch()
			sent = now
			g2, err := m.proto.acquire(ctx, m.keysOf(g), m.token, ttl, h, gather, place)
			switch {
			case isCrossSlot(err) && len(m.groups) == 1 && taken == 0:
				m.proto.cluster.Store(true) // a Cluster: by slot from now on
				if m.group(); len(m.groups) > 1 {
					continue
				}
				return core.Turn{}, err
			case err != nil:
				if core.IsAmbiguous(err) {
					dirty = true
				}
				return core.Turn{}, m.wrongKind(g, err)
			case !g2.ok:
				rtt = time.Duration(r.core.Now() - now)
				if g2.since != "" {
					place = g2.since
				}
				if g2.gathered && !gathering { // the key that kept it out longest freed
					gathering, m.gather = true, now+int64(gatherFor)
				}
				longest = m.blockedSince(g, g2.afters, blockedAt, now)
				sleep := g2.sleep
				if taken > 0 {
					// The groups taken are held while this one is waited
					// for: renewed every third of the TTL, so that a wait
					// longer than the TTL does not lose them.
					if now-renewed >= int64(ttl)/3 {
						at := r.core.Now()
						if ok, err := m.renewTaken(ctx, ttl, taken); err != nil || !ok {
							return restart(err)
						}
						renewed = at
					}
					sleep = min(sleep, time.Duration(max(renewed+int64(ttl)/3-r.core.Now(), int64(time.Millisecond))))
				}
				switch {
				case !line && waits: // it queues once its patience is over
					sleep = min(sleep, time.Duration(max(patience, int64(time.Millisecond))))
				case gathering:
					// It tries again within a turn: a turn it was given and
					// did not try within ends its place in that line
					// (prelude.lua, gone), and a poller that is due soon is
					// given the turns of the keys as they free.
					sleep = min(sleep, r.cfg.turnWindow, time.Duration(max(m.gather-now, int64(time.Millisecond))))
				}
				switch {
				case m.wake == nil:
				case line && len(g2.afters) == len(g):
					m.watchFor(g, g2.afters, base)
					return core.Turn{Sleep: sleep, After: 1}, nil
				case !line && len(g2.afters) == len(g):
					m.watchAll(g, g2.afters, base)
					return core.Turn{Sleep: sleep, After: 1}, nil
				}
				return core.Turn{Sleep: sleep, After: g2.after}, nil
			}
			for i, k := range g {
				m.fences[k] = g2.fences[i]
			}
			if taken++; taken == 1 {
				renewed = sent
			}
			if taken == len(m.groups) && taken > 1 {
				// The earlier slots' keys were taken before this one was
				// waited for: renewed now, they are valid as long as the
				// last; one lost meanwhile means starting over.
				if ok, err := m.renewTaken(ctx, ttl, taken-1); err != nil || !ok {
					return restart(err)
				}
			}
		}
		return core.Turn{OK: true}, nil
	}
	if waits && m.wake != nil {
		r.watch.add(m.names, m.counts)
		defer r.watch.remove(m.names, m.counts)
	}
	if waits {
		w := core.Waiting{Key: m.desc, Verb: "obtaining", Retrying: "lockyard: multi-key obtain failed, retrying", Idle: r.cfg.idle, Wake: m.wake}
		if m.wake != nil {
			w.Listener = r.subscriber.listener(m.lks...)
		}
		waited, err = r.core.Acquire(ctx, &w, true, attempt)
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
	armed := false // a key blocked only by a turn sends no message: the sleep ends it
	for i, k := range g {
		if held[i] == 0 {
			continue
		}
		armed = true
		kw := m.keys[k]
		m.pending.Add(1)
		kw.armed.Store(true)
		if kw.n.Load() > base[k] && kw.armed.CompareAndSwap(true, false) {
			m.pending.Add(-1) // a message came meanwhile
		}
	}
	if armed && m.pending.Load() <= 0 {
		m.wake.Signal(1)
	}
}

// blockedSince records, from a failed attempt's per-key reply (afters:
// nonzero for a key kept from it), since when each key of g has kept the
// waiter out, and returns the one that has kept it out longest (an index
// of m.lks), or -1.
func (m *multiLock) blockedSince(g []int, afters []int64, at []int64, now int64) int {
	if len(afters) != len(g) {
		return -1
	}
	worst := -1
	for i, k := range g {
		switch {
		case afters[i] == 0:
			at[k] = 0
		case at[k] == 0:
			at[k] = now
		}
		if at[k] != 0 && (worst < 0 || at[k] < at[worst]) {
			worst = k
		}
	}
	return worst
}

// renewTaken renews the keys of the first n groups to ttl, and reports
// whether the token still held them all.
func (m *multiLock) renewTaken(ctx context.Context, ttl time.Duration, n int) (bool, error) {
	for _, g := range m.groups[:n] {
		held, err := m.proto.renew(ctx, m.keysOf(g), m.token, ttl)
		if err != nil || slices.Contains(held, false) {
			return false, err
		}
	}
	return true, nil
}

// giveBack frees, in the background, whatever a failed acquisition may
// have left: the keys that the token holds, and the waiter's place in
// every line.
func (m *multiLock) giveBack() {
	r := m.eng
	id := m.waiter.Renew(&r.core)
	groups, token := m.groups, m.token
	r.soon(func(ctx context.Context) {
		for _, g := range groups {
			lks := m.keysOf(g)
			_, _, _ = r.core.Retried(ctx, func(ctx context.Context) (bool, error) {
				_, err := m.proto.release(ctx, lks, token)
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
