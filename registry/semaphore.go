package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// Semaphore returns the counting semaphore on key, cached like Obtain: at
// most permits Leases of it are held at once across every process that
// uses this registry key. The semaphore's key is the lock key of the same
// name: a key is a lock or a semaphore, not both. It returns
// ErrInvalidConfig for permits < 1, for a semaphore cached with another
// count of permits, and on a Redlock registry or one made WithReplicaAck;
// ErrInvalidKey for a bad key or one that this registry uses as a lock;
// ErrClosed or ErrCacheFull as Obtain. It does not contact Redis: a count
// that differs from the one the semaphore's permits are held with is told
// by Acquire (see Semaphore).
func (r *Registry) Semaphore(key string, permits int) (*Semaphore, error) {
	switch {
	case r.core.BG.IsClosed():
		return nil, ErrClosed
	case permits < 1:
		return nil, fmt.Errorf("%w: permits %d < 1", ErrInvalidConfig, permits)
	case r.sem == nil:
		return nil, fmt.Errorf("%w: a semaphore needs one Redis master, not Redlock", ErrInvalidConfig)
	case r.cfg.ackReplicas > 0:
		return nil, fmt.Errorf("%w: a semaphore does not wait for replicas (WithReplicaAck)", ErrInvalidConfig)
	}
	if err := checkLockKey(r.layout, key); err != nil {
		return nil, err
	}
	e, ok := r.cache.peek(key)
	if !ok {
		var err error
		if e, err = r.cache.getOrInsert(key, func() cached { return newSemaphore(&r.engine, r.sem, key, permits) }); err != nil {
			return nil, err
		}
	}
	s, ok := e.(*Semaphore)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q is a %s in this registry", ErrInvalidKey, key, e.kind())
	case s.permits != permits:
		return nil, fmt.Errorf("%w: semaphore %q has %d permits in this registry, not %d", ErrInvalidConfig, key, s.permits, permits)
	}
	s.touch()
	return s, nil
}

// Key returns the semaphore's Redis key (as RedisLock.Key).
func (s *Semaphore) Key() string { return s.key }

// Permits returns how many leases of the semaphore may be held at once.
func (s *Semaphore) Permits() int { return s.permits }

// Acquire waits for a permit, or until ctx ends, and returns it as a
// Lease. ttl <= 0 means expireAfter; otherwise it is the permit's TTL,
// checked as for Registry.Acquire. The Lease is a permit: Token (a fencing
// token of its own, from one counter per semaphore), Lost, Renew, Release
// and ReleaseAfter work as for a lock's Lease, from any goroutine, and
// WithAutoRenew renews it. Transient Redis errors are retried until ctx
// ends; other errors return at once: ErrWrongKind (the key is a lock's),
// ErrInvalidConfig (its permits are held with another count). On error
// nothing is held.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return s.acquire(ctx, ttl, true)
}

// TryAcquire makes one attempt, locally and in Redis: ErrNotObtained when
// every permit is held (or the free ones are the turns of waiters in
// line). Other errors are those of Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Lease, error) {
	return s.acquire(ctx, ttl, false)
}

func (s *Semaphore) acquire(ctx context.Context, ttl time.Duration, waits bool) (*Lease, error) {
	r := s.eng
	if !waits {
		le, err := s.acquireOnce(ctx, ttl, false)
		r.obs.tried(err)
		return le, err
	}
	r.obs.waiting(kindSemaphore, s.key)
	le, err := s.acquireOnce(ctx, ttl, true)
	r.obs.waited(err)
	return le, err
}

// acquireOnce is acquire's attempt (TryAcquire), or its wait.
func (s *Semaphore) acquireOnce(ctx context.Context, ttl time.Duration, waits bool) (*Lease, error) {
	r := s.eng
	if ttl <= 0 {
		ttl = r.cfg.expireAfter
	} else if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return nil, err
	}
	if r.core.BG.IsClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, core.WrapKey("waiting for", s.key, err)
	}
	s.touch()
	if !waits {
		return s.try(ctx, ttl)
	}
	start := r.core.Now()
	s.mu.Lock()
	s.needers++
	s.mu.Unlock()
	who := reentrant.NewOwner()
	how, err := s.head.Lock(ctx, r.core.BG.Closed, nil, reentrant.Request{}, who)
	switch {
	case errors.Is(err, reentrant.ErrAborted):
		s.giveUp(nil)
		return nil, ErrClosed
	case err != nil:
		s.giveUp(nil)
		return nil, core.WrapKey("waiting for", s.key, err)
	}
	p, waited, err := s.obtain(ctx, ttl)
	// The next lease in line becomes the head once this one has its
	// permit, or gives up.
	if err != nil {
		s.giveUp(&who)
		return nil, err
	}
	s.gotPermit(&who)
	h := p.h.Load()
	return &Lease{of: p, h: h, since: r.obs.acquired(kindSemaphore, s.key, h, waited || how == reentrant.Queued, time.Duration(r.core.Now()-start))}, nil
}

// try makes one attempt for TryAcquire: it fails at once while other
// leases of this registry wait, and never queues.
func (s *Semaphore) try(ctx context.Context, ttl time.Duration) (*Lease, error) {
	r := s.eng
	s.mu.Lock()
	waiting := s.needers > 0
	s.mu.Unlock()
	if waiting {
		return nil, fmt.Errorf("%w: leases of this registry wait for a permit of %q", ErrNotObtained, s.key)
	}
	// Not the instance's id: an attempt that is admitted takes its own
	// entry out of line, and the instance's is the waiting leases'.
	p, _, err := s.attempt(ctx, ttl, hint{waiter: s.waiter.ID() + "/try", spread: rand.N(r.cfg.idle/4 + 1)}, false, true, 0)
	switch {
	case err != nil:
		return nil, core.WrapKey("acquiring", s.key, err)
	case p == nil:
		return nil, fmt.Errorf("%w: every permit of %q is held, or is the turn of a waiter in line", ErrNotObtained, s.key)
	}
	s.mu.Lock()
	s.held++
	s.mu.Unlock()
	h := p.h.Load()
	return &Lease{of: p, h: h, since: r.obs.acquired(kindSemaphore, s.key, h, false, -1)}, nil
}

// gotPermit counts a new lease held, and ends its wait (done).
func (s *Semaphore) gotPermit(who *reentrant.Owner) {
	s.mu.Lock()
	s.held++
	s.mu.Unlock()
	s.done(who)
}

// giveUp ends the wait of a lease that gets no permit (done). The last to
// give up gives back the permit that a grant whose message was lost may
// hold: no attempt of the instance will claim it (done, claimable).
func (s *Semaphore) giveUp(who *reentrant.Owner) { s.end(who, true) }

// done ends the wait of a lease, and hands the head on if it had it (who:
// the head's owner). The last lease to stop waiting gives back the permits
// handed off meanwhile (the head may have got its own from Redis), and
// takes the instance out of the wait queue if it is still in it.
func (s *Semaphore) done(who *reentrant.Owner) { s.end(who, false) }

// end is done; gaveUp: the lease got no permit. The last lease to give up
// gives back the permit that a grant whose message was lost may hold
// (claimable), once the instance's entry has left the line, after which no
// script grants it one more; so does the last lease to end while a grant
// left to a claim (leftClaim) was not claimed (the head took a spare, or
// got a permit of its own).
func (s *Semaphore) end(who *reentrant.Owner, gaveUp bool) {
	var claim string
	s.mu.Lock()
	s.needers--
	var spare []*permit
	last := s.needers == 0
	if last && s.pubsub && (gaveUp || s.leftClaim != 0) {
		claim = s.claimable()
	}
	var leave string
	if last && s.queued {
		// Before the next lease can wait: it queues under the new id.
		leave = s.waiter.Renew(&s.eng.core)
	}
	if last {
		spare, s.spare, s.queued = s.spare, nil, false
	}
	s.mu.Unlock()
	switch {
	case leave != "":
		s.leaveQueue(leave, claim)
	case claim != "":
		s.releaseLater(claim)
	}
	if who != nil {
		_ = s.head.Unlock(*who)
	}
	for _, p := range spare {
		h := p.h.Load()
		h.Retire()
		s.releaseLater(h.Token)
	}
}
