package registry

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// A semaphore's leases: release, and the hand-off of a permit to the next
// lease of the same registry that waits for one (as a lock's hold is
// handed off: the engine's handoff.go).

// A permit as the part of its semaphore that a Lease holds (leased).
func (p *permit) leaseKey() string     { return p.s.key }
func (p *permit) holds(le *Lease) bool { return p.h.Load() == le.h }
func (p *permit) endLease(ctx context.Context, le *Lease) error {
	return p.s.endLease(ctx, p, le)
}
func (p *permit) endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error {
	return p.s.endLeaseAfter(ctx, p, le, d)
}

// endLease releases le's permit p: it passes to the next lease of this
// registry that waits, or is given back in Redis (semrelease.lua). Errors
// are those of a lock's Lease.Release.
func (s *Semaphore) endLease(ctx context.Context, p *permit, le *Lease) error {
	s.eng.obs.released(kindSemaphore, s.key, p.h.Load(), le.since)
	var passed error
	if s.waited() {
		switch res, err := s.handOff(ctx, p); res {
		case handedOver:
			s.ended()
			return nil
		case releasedForOthers:
			h := p.h.Load()
			return s.teardown(h, h.LostAtRelease())
		case passFailed:
			return s.teardown(p.h.Load(), err)
		case releaseAfterPass:
			if core.IsAmbiguous(err) {
				passed = err // the pass may have run: it may have given the permit on
			}
		}
	}
	h := p.h.Load()
	return s.teardown(h, s.release(ctx, h, passed))
}

// endLeaseAfter ends le but leaves its permit taken in Redis for d: one
// renewal sets the permit to expire d from now. Once it has expired, a
// nudge (semnudge.lua) gives it back and tells the waiters in line, who
// would otherwise sleep until their poll: the expiry they were told of
// was the permit's old one.
func (s *Semaphore) endLeaseAfter(ctx context.Context, p *permit, le *Lease, d time.Duration) error {
	h := p.h.Load()
	s.eng.obs.released(kindSemaphore, s.key, h, le.since)
	err := s.eng.expireAfter(ctx, s.key, h, d, func(ctx context.Context) (time.Duration, error) {
		return s.proto.nudge(ctx, s.key, h.Token, s.permits) // semnudge.lua
	})
	return s.teardown(h, err)
}

// giveTurns gives the turns of the free permits to the waiters in line
// after a plain release (releasePlain) found some, or may have left the
// permit free unannounced. The script is safe to run again (a turn given is
// not given twice): after a timeout, whose outcome is unknown, it runs once
// more in the background. If that fails too, the waiters try at their polls.
func (s *Semaphore) giveTurns(ctx context.Context) {
	r := s.eng
	s.crowd.Found(true, r.core.Now())
	give := func(ctx context.Context) error {
		var migrating error
		_, _, err := r.core.Retried(ctx, func(ctx context.Context) (bool, error) {
			others, err := s.proto.giveTurns(ctx, s.key, s.permits)
			if core.IsTryAgain(err) {
				// A Cluster slot migrates: no script on all of the
				// semaphore's keys runs until it ends. Not retried: the
				// permit is back, and the waiters find it at their polls.
				migrating = err
				return true, nil
			}
			if err == nil {
				s.crowd.Found(others, r.core.Now())
			}
			return true, err
		})
		return cmp.Or(err, migrating)
	}
	failed := func(err error) {
		r.core.Log.Debug("lockyard: giving the turns after a release failed; the waiters try at their polls", "key", s.key, "err", err)
	}
	switch err := give(ctx); {
	case err != nil && core.IsAmbiguous(err):
		r.soon(func(ctx context.Context) {
			if err := give(ctx); err != nil {
				failed(err)
			}
		})
	case err != nil:
		failed(err)
	}
}

// waited reports whether leases of this registry wait for a permit.
func (s *Semaphore) waited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.needers > 0
}

// release gives h's permit back in Redis (engine.release): by plain
// commands while the instance expects no waiter (quiet), else by
// semrelease.lua. After plain commands that found waiters, or whose
// outcome is not known, the turns of the free permits are given
// (giveTurns). passed is the network error of a pass that this release
// replaces, after which the pass may have run, or nil.
func (s *Semaphore) release(ctx context.Context, h *core.Hold, passed error) error {
	plain, turns := s.quiet() && s.proto.plainOK(), false
	err := s.eng.release(ctx, s.key, h, passed, func(ctx context.Context) (bool, error) {
		if plain {
			done, waiters, handled, err := s.proto.releasePlain(ctx, s.key, h.Token)
			if handled {
				turns = waiters
				return done, err
			}
			plain = false
		}
		done, others, err := s.proto.release(ctx, s.key, h.Token, s.permits)
		if err == nil {
			s.crowd.Found(others, s.eng.core.Now())
		}
		return done, err
	}, s.gone)
	if turns {
		s.giveTurns(context.WithoutCancel(ctx))
	}
	return err
}

// gone is the loss of a permit that was not its lease's at its release.
func (s *Semaphore) gone() error {
	return fmt.Errorf("%w: a permit of %q expired or was pruned", ErrLockLost, s.key)
}

// teardown ends a lease whose hold h ended with err: h is retired (a loss
// counted), and the lease no longer counts as held.
func (s *Semaphore) teardown(h *core.Hold, err error) error {
	h.End(err)
	s.ended()
	return err
}

// ended counts a lease no longer held, and wakes the head, which may be
// waiting for a lease of its registry to end (holdsAll).
func (s *Semaphore) ended() {
	s.mu.Lock()
	s.held--
	if s.needers > 0 {
		s.wake.Poke()
	}
	s.mu.Unlock()
	s.touch()
}

// handOff passes p to the next lease of this registry that waits
// (engine.handOff): with no command (a free pass, for as long after the
// last command on p as the engine allows a key of s.permits holds), or with
// sempass.lua, which keeps the permit unless waiters of other registries
// are in line for it, or the run of local holds reached its bound. The
// next lease gets the TTL most leases ask for; another is renewed to by
// its taker.
func (s *Semaphore) handOff(ctx context.Context, p *permit) (handoffResult, error) {
	return s.eng.handOff(ctx, s.key, p.h.Load(), &p.run, s.eng.cfg.expireAfter, 0, s.permits, semPass{s, p})
}

// semPass is a semaphore's part of its local hand-off (passer).
type semPass struct {
	s *Semaphore
	p *permit
}

func (sp semPass) give() handoffResult       { return sp.s.give(sp.p) }
func (sp semPass) releaseLater(token string) { sp.s.releaseLater(token) }

// pass runs sempass.lua for h, sent at sent.
func (sp semPass) pass(ctx context.Context, h *core.Hold, next time.Duration, bounded bool, sent int64) (handoffResult, error) {
	s, p := sp.s, sp.p
	s.mu.Lock()
	more, at, queued := s.needers > 1, s.queuedAt, s.queued
	s.mu.Unlock()
	res, err := s.proto.pass(ctx, s.key, h.Token, s.waiter.ID(), next, s.permits, bounded, more, queued)
	if err != nil {
		return notHandedOver, err
	}
	switch res.outcome {
	case passKept:
		if !more {
			s.mu.Lock()
			if s.queuedAt == at { // sempass took the entry out of line, and no attempt queued it since
				s.queued = false
			}
			s.mu.Unlock()
		}
		s.install(p, core.NewHold(&s.eng.core, s.key, h.Token, res.fence, next, core.ValidUntil(sent, next), p, s.proto))
		return handedOver, nil
	case passGone:
		return notHandedOver, s.gone()
	}
	return releasedForOthers, nil
}

// give hands p to the leases of this registry that wait, and wakes the one
// that talks to Redis; notHandedOver if none waits any more (they gave
// up meanwhile).
func (s *Semaphore) give(p *permit) handoffResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.needers == 0 {
		return notHandedOver
	}
	s.spare = append(s.spare, p)
	s.wake.Poke()
	return handedOver
}

// hasSpare reports whether a permit was handed off and not yet taken.
func (s *Semaphore) hasSpare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spare) > 0
}

// takeSpare takes a permit handed off by a lease of this registry, if
// any, for the head, which asked for a TTL of ttl. A permit of another TTL
// is renewed to ttl first; one no longer valid is given back in the
// background, and the next is tried.
func (s *Semaphore) takeSpare(ctx context.Context, ttl time.Duration) *permit {
	r := s.eng
	for {
		s.mu.Lock()
		if len(s.spare) == 0 {
			s.mu.Unlock()
			return nil
		}
		p := s.spare[0]
		s.spare = s.spare[1:]
		s.mu.Unlock()
		h := p.h.Load()
		if h.TTL() != ttl && !h.Lost(r.core.Now()) {
			h.Renewing.Lock()
			_ = h.Renew(ctx, ttl) // a failure leaves h lost, or valid at its TTL
			h.Renewing.Unlock()
		}
		if !h.Lost(r.core.Now()) {
			return p
		}
		h.Lose()
		h.Retire()
		s.releaseLater(h.Token)
	}
}

var _ core.Holder = (*permit)(nil)

func (p *permit) KindName() string { return kindSemaphore }

// HoldLost: a lost permit blocks no lease of its registry (each waits for
// a permit in Redis, where the lost one has expired or is gone), so there
// is nothing to free locally; its lease sees the loss (Lost, Release).
func (p *permit) HoldLost(*core.Hold) {}

// quiet reports whether the instance expects nobody in line (crowd).
func (s *Semaphore) quiet() bool { return s.crowd.Quiet(s.eng.core.Now(), s.eng.cfg.crowdMemory) }
