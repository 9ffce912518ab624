package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
	taken := 0    // the groups taken, in order
	dirty := true // an attempt may have left keys taken or the waiter queued
	var rtt time.Duration
	attempt := func(ctx context.Context, first bool, mark int64) (core.Turn, error) {
		for taken < len(m.groups) {
			g := m.groups[taken]
			now := r.core.Now()
			gather := now < m.gather
			h := hint{waits: waits, waiter: m.waiter.ID(), spread: rand.N(r.cfg.idle/4 + 1), rtt: rtt}
			g2, err := m.proto.acquire(ctx, m.keysOf(g), m.token, ttl, h, gather)
			switch {
			case isCrossSlot(err) && !m.proto.cluster.Load() && taken == 0:
				m.proto.cluster.Store(true) // a Cluster: by slot from now on
				m.group()
				continue
			case err != nil:
				if core.IsAmbiguous(err) {
					dirty = true
				}
				return core.Turn{}, m.wrongKind(g, err)
			case !g2.ok:
				dirty = true
				rtt = time.Duration(r.core.Now() - now)
				if first || g2.blocked < m.blocked {
					m.gather = r.core.Now() + int64(multiGather) // it gained a key: gather
				}
				m.blocked = g2.blocked
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
	if waits {
		r.watch.add(m.names, m.wake)
		w := core.Waiting{Key: m.desc, Verb: "obtaining", Retrying: "lockyard: multi-key obtain failed, retrying", Idle: r.cfg.idle, Wake: m.wake}
		if m.wake != nil {
			w.Listener = r.subscriber
		}
		waited, err = r.core.Acquire(ctx, &w, true, func(ctx context.Context, first bool, mark int64) (core.Turn, error) {
			sent = r.core.Now()
			return attempt(ctx, first, mark)
		})
		r.watch.remove(m.names, m.wake)
	} else {
		var t core.Turn
		t, err = attempt(ctx, true, 0)
		switch {
		case err == nil && !t.OK:
			err = fmt.Errorf("%w: %s", ErrNotObtained, m.desc)
			dirty = taken > 0 // refused: nothing taken unless an earlier slot's group
		case err != nil:
			dirty = taken > 0 || core.IsAmbiguous(err)
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
	if dirty {
		m.giveBack()
	}
	return waited, err
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
