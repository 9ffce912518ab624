package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/reentrant"
)

// A semaphore's leases: release, the hand-off of a permit to the next
// local owner (as a lock's hold is handed off: handoff.go), and the loss
// of a permit, which frees its local unit for the waiters (as revoke.go
// does for a lock).

// The Semaphore as the kind of its leases.
func (s *Semaphore) leaseKey() string { return s.key }

func (s *Semaphore) holds(le *Lease) bool { return !s.local.Revoked(le.who) }

// endLease releases le's permit: it passes to the next local owner, or
// is given back in Redis (semrelease.lua). Errors are those of a lock's
// Lease.Release.
func (s *Semaphore) endLease(ctx context.Context, le *Lease) error {
	p, err := s.leave(le)
	if err != nil {
		return err
	}
	if s.local.Waiters() > 0 {
		switch res, err := s.handOff(ctx, p, le.who); res {
		case handedOver:
			return nil
		case releasedForOthers:
			return s.teardown(p, err, le.who)
		case passFailed:
			return s.teardown(p, err, le.who)
		}
	}
	return s.teardown(p, s.release(ctx, p.h.Load()), le.who)
}

// endLeaseAfter ends le but leaves its permit taken in Redis for d: one
// renewal sets the permit to expire d from now, and the local unit is
// freed. Waiters find the permit free once it has expired (they sleep
// until the soonest permit expires, or their poll interval).
func (s *Semaphore) endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error {
	p, err := s.leave(le)
	if err != nil {
		return err
	}
	r := s.reg
	h := p.h.Load()
	h.retire()
	h.renewing.Lock()
	ok, _, err := r.retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
		return r.sem.renew(ctx, s.key, h.token, d)
	})
	h.renewing.Unlock()
	switch {
	case err != nil:
		err = errors.Join(fmt.Errorf("%w: %q: %w", ErrReleaseFailed, s.key, err), s.lostAtRelease(h))
	case !ok:
		err = errGone(s.key)
	default:
		err = s.lostAtRelease(h)
	}
	return s.teardown(p, err, le.who)
}

// leave begins the end of le in the local semaphore, and returns its
// permit; ErrLockLost if the permit was lost and its unit passed on.
func (s *Semaphore) leave(le *Lease) (*permit, error) {
	_, err := s.local.Leave(le.who) // a lease is not reentrant: always its last hold
	switch {
	case errors.Is(err, reentrant.ErrRevoked):
		return nil, fmt.Errorf("%w: a permit of %q was lost while held, and its place passed on", ErrLockLost, s.key)
	case err != nil:
		return nil, fmt.Errorf("%w: %q", ErrNotOwner, s.key)
	}
	return le.h.kind.(*permit), nil
}

// release gives h's permit back in Redis, retried as a lock's release is
// (deleteToken), with a context that ignores the caller's cancellation.
func (s *Semaphore) release(ctx context.Context, h *hold) error {
	r := s.reg
	h.retire()
	done, first, err := r.retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
		done, _, err := r.sem.release(ctx, s.key, h.token, s.permits)
		return done, err
	})
	switch {
	case err != nil:
		return errors.Join(fmt.Errorf("%w: %q: %w", ErrReleaseFailed, s.key, err), s.lostAtRelease(h))
	case !done && first != nil:
		return fmt.Errorf("%w: a permit of %q was gone at a retried release (the first attempt failed with %w and may have given it back)", ErrLockLost, s.key, first)
	case !done:
		return fmt.Errorf("%w: a permit of %q expired or was pruned", ErrLockLost, s.key)
	}
	return s.lostAtRelease(h)
}

// lostAtRelease returns ErrLockLost if h's validity ended before it was
// given back.
func (s *Semaphore) lostAtRelease(h *hold) error {
	if h.lost(s.reg.now()) {
		return fmt.Errorf("%w: validity of a permit of %q ended before release", ErrLockLost, s.key)
	}
	return nil
}

// teardown ends p's run in this registry after its hold ended with err: the
// hold is retired (a loss counted), p forgotten, and who's unit freed.
func (s *Semaphore) teardown(p *permit, err error, who reentrant.Owner) error {
	h := p.h.Load()
	h.retire()
	if errors.Is(err, ErrLockLost) {
		h.countLost()
	}
	s.forget(p)
	s.unlockLocal(who)
	return err
}

func (s *Semaphore) forget(p *permit) {
	s.mu.Lock()
	delete(s.live, p)
	s.mu.Unlock()
}

// handOff passes p, held by who, to the next local owner: with no command
// (a free pass, on the rules of a lock's), or with sempass.lua, which keeps
// the permit unless waiters in line need it or the run of local holds
// reached its bound.
func (s *Semaphore) handOff(ctx context.Context, p *permit, who reentrant.Owner) (handoffResult, error) {
	r := s.reg
	h := p.h.Load()
	now := r.now()
	if r.bg.isClosed() || h.lost(now) {
		return notHandedOver, nil
	}
	next := r.cfg.expireAfter
	if req, ok := s.local.Next(); ok && req.TTL > 0 {
		next = req.TTL
	}
	bounded := now-p.since >= int64(r.cfg.chainSpan)
	if !r.cfg.fencing && !bounded && p.passes < maxFreePasses && now-p.lastCmd < int64(r.cfg.freePassSpan) &&
		h.TTL() == next && h.deadline.Load()-now >= int64(next*3/4) {
		p.passes++
		return s.give(p, who), nil
	}
	// As for a lock's pass: h is retired whatever the outcome, and no
	// renewal of it reaches Redis after the pass.
	h.retire()
	h.renewing.Lock()
	defer h.renewing.Unlock()
	sent := r.now()
	res, err := r.sem.pass(context.WithoutCancel(ctx), s.key, h.token, next, s.permits, bounded)
	switch {
	case isStaleConn(err), err != nil && !isAmbiguous(err) && isTransient(err):
		return notHandedOver, nil // release instead
	case err != nil:
		s.releaseLater(h.token)
		return passFailed, fmt.Errorf("%w: %q: %w", ErrReleaseFailed, s.key, err)
	}
	switch res.outcome {
	case passKept:
		p.passes, p.lastCmd = 0, sent
		s.install(p, newHold(&r.core, s.key, h.token, res.fence, next, validUntil(sent, next), p, r.sem))
		return s.give(p, who), nil
	case passGone:
		return passFailed, fmt.Errorf("%w: a permit of %q expired or was pruned", ErrLockLost, s.key)
	}
	return releasedForOthers, s.lostAtRelease(h)
}

// give hands who's unit of the local semaphore, with p, to the head of the
// local queue; if the waiters left meanwhile who keeps both.
func (s *Semaphore) give(p *permit, who reentrant.Owner) handoffResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.ending.Store(true) // not revocable until the next owner took it
	ok, err := s.local.HandOff(who)
	if err != nil {
		panic("lockyard: internal error: local semaphore not held: " + err.Error())
	}
	if !ok {
		p.ending.Store(false)
		return notHandedOver
	}
	// The owner it went to takes it (inherit) once s.mu is free; so may
	// another that was given a unit meanwhile: permits are alike.
	s.spare = append(s.spare, p)
	return handedOver
}

// inherit takes a permit handed off to the local semaphore, if any, for
// who, which asked for a TTL of ttl. A permit of another TTL is renewed to
// ttl first; one no longer valid is given back in the background, and who
// acquires in Redis.
func (s *Semaphore) inherit(ctx context.Context, ttl time.Duration, who reentrant.Owner) *permit {
	r := s.reg
	s.mu.Lock()
	if len(s.spare) == 0 {
		s.mu.Unlock()
		return nil
	}
	p := s.spare[0]
	s.spare = s.spare[1:]
	s.mu.Unlock()
	p.who.Store(int64(who))
	h := p.h.Load()
	if h.TTL() != ttl && !h.lost(r.now()) {
		h.renewing.Lock()
		_ = h.renew(ctx, ttl) // a failure leaves h lost, or valid at its TTL
		h.renewing.Unlock()
	}
	if !h.lost(r.now()) {
		p.ending.Store(false)
		return p
	}
	h.lose() // ending: not revoked
	h.retire()
	s.forget(p)
	s.releaseLater(h.token)
	return nil
}

var _ holder = (*permit)(nil)

// holdLost frees the local unit of p's owner if leases wait for one (the
// owner's Release then returns ErrLockLost); otherwise the next lease to
// queue does it (semHook).
func (p *permit) holdLost(h *hold) {
	if p.s.local.Waiters() > 0 {
		p.s.revoke(p, h)
	}
}

// revoke takes the local unit from p's owner, h being p's hold and lost,
// unless that owner is releasing it or handing it off; h is retired, and
// the permit given back in the background if it is still there.
func (s *Semaphore) revoke(p *permit, h *hold) bool {
	who := reentrant.Owner(p.who.Load())
	if !s.local.RevokeOwner(who, func() bool { return p.h.Load() == h && !p.ending.Load() }) {
		return false
	}
	h.retire()
	s.forget(p)
	s.releaseLater(h.token)
	s.reg.log.Warn("lockyard: semaphore permit lost while held; its place passed on", "key", s.key, "token", h.fence)
	return true
}

// semHook is a Semaphore as its local semaphore's reentrant.Observer: when
// a lease queues, permits found lost are revoked so that it does not wait
// for them.
type semHook Semaphore

func (q *semHook) Queued() {
	s := (*Semaphore)(q)
	now := s.reg.now()
	var lost []*hold
	s.mu.Lock()
	for p := range s.live {
		if h := p.h.Load(); h.lost(now) && !h.released() {
			lost = append(lost, h)
		}
	}
	s.mu.Unlock()
	for _, h := range lost {
		h.lose()
	}
}
