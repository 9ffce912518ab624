package registry

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The head of a Semaphore in Redis: it obtains a permit (handed off, or
// from semacquire.lua, waiting its turn in the wait queue), installs it,
// and leaves the queue when it gives up.

// obtain gets the head a permit, in the engine's waiting loop
// (core.Acquire): one handed off by a lease of this registry, or one from
// Redis, trying semacquire.lua until it grants one, sleeping between tries
// as the script says, and waking early when the registry is told that its
// turn has come or a permit is handed off. The caller owns head.
func (s *Semaphore) obtain(ctx context.Context, ttl time.Duration) (p *permit, waited bool, err error) {
	r := s.eng
	s.mu.Lock()
	if !s.queued { // the last head's entry is gone: no turn to wait for
		s.turn.waitUntil = 0
	} else if s.grantWait > 0 {
		// A grant queued the instance again for this head: it waits for
		// the next grant, its own (no turn message counts).
		s.turn = semTurn{waitUntil: s.grantWait, mark: s.wake.Mark(), after: core.EveryTurn, rtt: s.turn.rtt}
	}
	s.grantWait = 0
	s.mu.Unlock()
	// line is the instance's wait in line: until when (0: none), and for
	// how many turn messages since mark. A head that leaves with a
	// permit handed off leaves it to the next head, which goes on waiting
	// instead of trying at once: its entry keeps its place, and an attempt
	// before its turn would only fail. An entry taken out of line meanwhile
	// by this registry (sempass.lua keeping a permit for the last lease that
	// waited, leaveQueue) clears queued, and with it the wait. One that the
	// server lost unannounced (FLUSHALL, an eviction) is found at the end of
	// the wait, which is at most the poll interval (the sleep semacquire.lua
	// gave), as for a head that waits alone.
	line := s.turn
	s.turn.waitUntil = 0
	defer func() { s.turn.waitUntil, s.turn.mark, s.turn.after = line.waitUntil, line.mark, line.after }()
	if left := line.waitUntil - r.core.Now(); line.waitUntil > 0 {
		// The last head left the instance queued: wait for its turn before
		// trying.
		waited = true
		if left > 0 {
			if err := r.core.Await(ctx, s.wake, time.Duration(left), line.mark, line.after, s.hasSpare); err != nil {
				return nil, waited, core.WaitErr(s.key, err, nil)
			}
		}
	}
	w := core.Waiting{Key: s.key, Verb: "acquiring", Retrying: "lockyard: semaphore acquire failed, retrying", Idle: r.cfg.idle, Wake: s.wake, Also: s.hasSpare,
		Local: func(ctx context.Context) (bool, error) {
			if p = s.takeSpare(ctx, ttl); p != nil || !s.holdsAll() {
				return p != nil, nil
			}
			// Every permit is held by this registry's leases: no attempt
			// can succeed, and the next release hands one over. Try Redis
			// after a poll interval all the same (a lease that was lost
			// and never released holds nothing there).
			waited = true
			if err := r.core.Await(ctx, s.wake, r.cfg.idle, s.wake.Mark(), core.EveryTurn, s.freedLocally); err != nil {
				return false, err
			}
			p = s.takeSpare(ctx, ttl)
			return p != nil, nil
		}}
	if s.pubsub {
		w.Listener = r.turns
	}
	more, err := r.core.Acquire(ctx, &w, true, func(ctx context.Context, first bool, mark int64) (core.Turn, error) {
		h := hint{waits: true, waiter: s.waiter.ID(), deaf: !s.pubsub || s.deaf(), spread: rand.N(r.cfg.idle/4 + 1), rtt: s.turn.rtt, queued: s.inLine()}
		sent := r.core.Now()
		var (
			g   grant
			err error
		)
		p, g, err = s.attempt(ctx, ttl, h, true, first, mark)
		line.waitUntil = 0
		switch {
		case err == nil && p != nil:
			line = s.turn // set by attempt if it queued the instance again
			return core.Turn{OK: true}, nil
		case err == nil:
			line = semTurn{waitUntil: sent + int64(max(g.sleep, 0)), mark: mark, after: g.after}
		}
		return core.Turn{Sleep: g.sleep, After: g.after}, err
	})
	if err != nil {
		return nil, waited || more, err
	}
	return p, waited || more, nil
}

// setQueued records, for the head, whether its attempt left the
// instance's entry in line. An instance that queued expects waiters:
// its releases give turns (crowd).
func (s *Semaphore) setQueued(q bool) {
	s.mu.Lock()
	s.queued = q
	s.queuedAt++
	s.mu.Unlock()
	if q {
		s.crowd.Found(true, s.eng.core.Now())
	}
}

// inLine reports whether the instance's entry is in the key's wait queue,
// as far as it knows.
func (s *Semaphore) inLine() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued
}

// freedLocally reports whether a lease of this registry handed off its
// permit, or ended: the head waiting for it goes on.
func (s *Semaphore) freedLocally() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spare) > 0 || s.held < s.permits
}

// holdsAll reports whether this registry's leases hold every permit.
func (s *Semaphore) holdsAll() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held >= s.permits
}

// deaf reports whether this instance hears no turn message, and so queues
// as a poller: it is not the cached one (evicted, and kept by its caller:
// the subscriber wakes the cached one), or the server refuses the turn
// channels.
func (s *Semaphore) deaf() bool {
	if s.eng.turns.refused.Load() {
		return true
	}
	e, ok := s.eng.cache.peek(s.name)
	return !ok || e != cached(s)
}

// attempt runs semacquire.lua once: a new permit, or nil and the grant
// that says when to try again. waits: the caller queues if it fails (the
// head of a registry's waiting leases); then, if more leases of the
// registry wait behind it, a successful attempt queues the instance again
// for them.
//
// mark is the waker's count before the attempt.
func (s *Semaphore) attempt(ctx context.Context, ttl time.Duration, h hint, waits, first bool, mark int64) (*permit, grant, error) {
	r := s.eng
	r.labels.publish(ctx) // once, before the registry's first attempt
	needers := 0
	if waits {
		s.mu.Lock()
		needers = s.needers
		s.mu.Unlock()
	}
	more := needers > 1
	var (
		token, record, claim string
		seq, claimed         uint64
	)
	sent := r.core.Now()
	if waits && s.pubsub {
		// Whether or not it asks for grants now: a grant whose message was
		// lost (its subscription broke: it then asks for none), or one left
		// to this claim (granted), may hold the permit.
		claimed, claim = s.claimArg()
	}
	if waits && s.asksGrants(h.deaf) {
		seq, token, record = s.grantRecordArg(sent, ttl, needers)
	} else {
		token = r.core.NewPermitToken(s.count)
	}
	compare := first && (s.compared.Load() == 0 || sent-s.compared.Load() >= int64(compareEvery))
	g, err := s.proto.acquire(ctx, s.key, token, ttl, s.permits, h, more, compare, s.quiet(), record, claim)
	if compare && err == nil {
		s.compared.Store(max(sent, 1))
	}
	switch {
	case err != nil:
		err = otherCount(s.permits, wrongKind(kindSemaphore, err))
		if core.IsAmbiguous(err) {
			// The script may have added the permit, or claimed one: each
			// is given back, unless a grant of its number came first (a
			// spare then, maybe in use); a grant of it still to come is
			// given back too (dropGrant).
			if s.dropGrant(seq) {
				s.releaseLater(token)
			}
			if s.dropGrant(claimed) {
				s.releaseLater(claim)
			}
			if seq == 0 {
				s.releaseLater(token)
			}
			if waits {
				s.setQueued(true) // or queued the instance: a head that gives up leaves the line
			}
		}
		return nil, unknown, err
	case !g.ok:
		if waits {
			s.turn.rtt = time.Duration(r.core.Now() - sent)
			if !s.grantCameFirst(seq) { // a grant that came before this reply set queued as the line is
				s.setQueued(true)
			}
		} else {
			s.crowd.Found(true, sent) // a full semaphore: the next attempt reads its count first, and a release gives turns
		}
		return nil, g.grant, nil
	}
	if waits && !g.claimed { // a claim leaves the entry as its grant left it
		s.setQueued(g.queued)
	}
	if waits && g.queued { // queued again for the leases behind (only a head asks): the next head waits for its turn
		s.turn.waitUntil, s.turn.mark, s.turn.after = sent+int64(g.sleep), mark, g.after
		if s.pubsub {
			r.turns.Listen(s.wake) // its turn is told on the registry's turn channel
		}
	}
	if g.claimed {
		token, seq = claim, claimed
	}
	deadline := core.ValidUntil(sent, ttl)
	if r.core.Now() >= deadline { // the reply came too late to be of use
		if s.dropGrant(seq) || seq == 0 {
			s.releaseLater(token)
		}
		return nil, grant{sleep: 0, after: -1}, nil
	}
	p := &permit{s: s, run: core.Run{Since: sent, LastCmd: sent}}
	if s.took(seq, p) {
		// The permit a script granted (a resent attempt found the one its
		// first run was granted, or a claim the one whose message came
		// meanwhile): a spare of the instance's already.
		return nil, grant{sleep: 0, after: -1}, nil
	}
	s.install(p, core.NewHold(&r.core, s.key, token, g.fence, ttl, deadline, p, s.proto))
	return p, g.grant, nil
}

// leaveQueue takes the instance's old waiter id out of the wait queue in
// the background, so that no turn is given to it (done gave the instance a
// new id first).
//
// claim, if set, is the token of a permit that a grant whose message was
// lost may hold for id: given back once the entry has left.
func (s *Semaphore) leaveQueue(id, claim string) {
	r := s.eng
	r.leave(s.key, id, func(ctx context.Context, lk, id string) error {
		err := s.proto.leave(ctx, lk, id, s.permits)
		if claim != "" { // even if the leave failed: a grant that comes later is given back (granted)
			if _, _, rerr := s.proto.release(ctx, lk, claim, s.permits); err == nil {
				err = rerr
			}
		}
		return err
	})
}
