package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/reentrant"
)

// Semaphore is a counting semaphore on one key: at most Permits leases of
// it are held at once across every process that uses the key with this
// registry key. Each Lease is one permit, with its own token and TTL,
// which expires by the Redis server's clock: a crashed holder's permit
// comes back when its TTL runs out, taken by the next attempt.
//
// The leases of one registry wait locally first, in FIFO order: only the
// first of them talks to Redis, as the head of a RedisLock's local queue
// does. Waiters of every registry take turns in arrival order in the key's
// wait queue (the lock's, see lua/prelude.lua), woken by a release message
// (PubSubLock) or by polling (SpinLock); a registry whose head gets a
// permit while more of its leases wait queues again behind the others. A
// permit released while another lease of the same registry waits passes
// to it, without a round trip or with one (as a lock's hold is handed off),
// unless waiters of other registries are in line for it.
//
// Processes that disagree on Permits (a rolling change of the limit) each
// admit themselves only while fewer permits than their own count are held:
// during the change at most the larger count hold, and a process with the
// smaller count waits until fewer than its count hold, which under steady
// load by the others may be long: finish the change promptly.
//
// A Semaphore needs one Redis master (a single node, Sentinel, or Cluster:
// its keys share one hash slot) and the TIME command; a Redlock registry or
// one made WithReplicaAck refuses it with ErrInvalidConfig.
type Semaphore struct {
	reg       *Registry
	key, name string
	permits   int
	// waiter is the semaphore instance's id in the key's wait queue, as a
	// RedisLock's (one entry per registry, kept by its successive heads).
	waiter   string
	head     reentrant.Mutex // owned by the lease that talks to Redis; the others queue on it
	wake     *waker          // wakes the head: release messages, or a permit handed off
	pubsub   bool
	lastUsed atomic.Int64

	turn semTurn // owned by the head

	// mu guards the following.
	mu      sync.Mutex
	needers int       // leases waiting for a permit in this registry (the head included)
	held    int       // leases held
	spare   []*permit // handed off by a lease, for the next needer
	queued  bool      // the instance's entry is in the key's wait queue
	// queuedAt counts the head's writes of queued, so that a pass that
	// took the entry out of line clears queued only if no attempt of the
	// head set it since the pass was sent.
	queuedAt uint64
}

// semTurn is the head's bookkeeping between heads: an acquisition that
// queued the instance again for the leases behind it says when the next
// head's turn may come.
type semTurn struct {
	waitUntil int64 // registry clock; 0: none
	mark      int64 // the waker's count when it was queued
	after     int   // release messages after mark until its turn
	rtt       time.Duration
}

// permit is one permit held in Redis: a token in the semaphore's sorted
// set, and the hold the watchdog renews. It passes from lease to lease of
// one registry (a hand-off); it is the holder of its holds.
type permit struct {
	h       atomic.Pointer[hold]
	since   int64 // registry clock: obtained in Redis (the run of local holds began)
	lastCmd int64 // registry clock: the last command on it
	passes  int   // free passes since the last command
}

// Semaphore returns the counting semaphore on key, cached like Obtain: at
// most permits Leases of it are held at once across every process that
// uses this registry key. The semaphore's key is the lock key of the same
// name: a key is a lock or a semaphore, not both. It returns
// ErrInvalidConfig for permits < 1, for a semaphore cached with another
// count of permits, and on a Redlock registry or one made WithReplicaAck;
// ErrInvalidKey for a bad key or one that this registry uses as a lock;
// ErrClosed or ErrCacheFull as Obtain. It does not contact Redis.
func (r *Registry) Semaphore(key string, permits int) (*Semaphore, error) {
	switch {
	case r.bg.isClosed():
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
		if e, err = r.cache.getOrInsert(key, func() cached { return newSemaphore(r, key, permits) }); err != nil {
			return nil, err
		}
	}
	s, ok := e.(*Semaphore)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %q is a lock in this registry", ErrInvalidKey, key)
	case s.permits != permits:
		return nil, fmt.Errorf("%w: semaphore %q has %d permits in this registry, not %d", ErrInvalidConfig, key, s.permits, permits)
	}
	s.touch()
	return s, nil
}

func newSemaphore(r *Registry, name string, permits int) *Semaphore {
	key := r.layout.LockKey(name)
	s := &Semaphore{reg: r, key: key, permits: permits, pubsub: r.cfg.lockType == PubSubLock,
		waiter: r.clientID + "/" + strconv.FormatUint(r.instances.Add(1), 10), wake: newWaker(PubSubLock)}
	s.name, _ = r.layout.UserKey(key)
	s.touch()
	return s
}

// Key returns the semaphore's Redis key (as RedisLock.Key).
func (s *Semaphore) Key() string { return s.key }

// Permits returns how many leases of the semaphore may be held at once.
func (s *Semaphore) Permits() int { return s.permits }

func (s *Semaphore) touch() { s.lastUsed.Store(s.reg.now()) }

// The Semaphore as a cache entry.
func (s *Semaphore) cacheKey() string { return s.name }
func (s *Semaphore) used() int64      { return s.lastUsed.Load() }
func (s *Semaphore) signal(k int64)   { s.wake.signal(k) }

func (s *Semaphore) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.needers > 0 || s.held > 0
}

// Acquire waits for a permit, or until ctx ends, and returns it as a
// Lease. ttl <= 0 means expireAfter; otherwise it is the permit's TTL,
// checked as for Registry.Acquire. The Lease is a permit: Token (a fencing
// token of its own, from one counter per semaphore), Lost, Renew, Release
// and ReleaseAfter work as for a lock's Lease, from any goroutine, and
// WithAutoRenew renews it. Transient Redis errors are retried until ctx
// ends; other errors (WRONGTYPE: the key is a lock's) return at once; on
// error nothing is held.
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
	r := s.reg
	if ttl <= 0 {
		ttl = r.cfg.expireAfter
	} else if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return nil, err
	}
	if r.bg.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapKey("waiting for", s.key, err)
	}
	s.touch()
	if !waits {
		return s.try(ctx, ttl)
	}
	start := r.now()
	s.mu.Lock()
	s.needers++
	s.mu.Unlock()
	who := reentrant.NewOwner()
	how, err := s.head.Lock(ctx, r.bg.closed, nil, reentrant.Request{}, who)
	switch {
	case errors.Is(err, reentrant.ErrAborted):
		s.giveUp(nil)
		return nil, ErrClosed
	case err != nil:
		s.giveUp(nil)
		return nil, wrapKey("waiting for", s.key, err)
	}
	p, waited, err := s.obtain(ctx, ttl)
	// The next lease in line becomes the head once this one has its
	// permit, or gives up.
	if err != nil {
		s.giveUp(&who)
		return nil, err
	}
	s.gotPermit(&who)
	r.stats.acquired(waited || how == reentrant.Queued, time.Duration(r.now()-start))
	return &Lease{of: s, h: p.h.Load()}, nil
}

// try makes one attempt for TryAcquire: it fails at once while other
// leases of this registry wait, and never queues.
func (s *Semaphore) try(ctx context.Context, ttl time.Duration) (*Lease, error) {
	r := s.reg
	s.mu.Lock()
	waiting := s.needers > 0
	s.mu.Unlock()
	if waiting {
		return nil, fmt.Errorf("%w: leases of this registry wait for a permit of %q", ErrNotObtained, s.key)
	}
	// Not the instance's id: an attempt that is admitted takes its own
	// entry out of line, and the instance's is the waiting leases'.
	p, _, err := s.attempt(ctx, ttl, hint{waiter: s.waiter + "/try", spread: rand.N(r.cfg.idle/4 + 1)}, false, 0)
	switch {
	case err != nil:
		return nil, wrapKey("acquiring", s.key, err)
	case p == nil:
		return nil, fmt.Errorf("%w: every permit of %q is held, or is the turn of a waiter in line", ErrNotObtained, s.key)
	}
	s.mu.Lock()
	s.held++
	s.mu.Unlock()
	r.stats.acquired(false, -1)
	return &Lease{of: s, h: p.h.Load()}, nil
}

// gotPermit counts a new lease held, and ends its wait (done).
func (s *Semaphore) gotPermit(who *reentrant.Owner) {
	s.mu.Lock()
	s.held++
	s.mu.Unlock()
	s.done(who)
}

// giveUp ends the wait of a lease that gets no permit (done).
func (s *Semaphore) giveUp(who *reentrant.Owner) { s.done(who) }

// done ends the wait of a lease, and hands the head on if it had it (who:
// the head's owner). The last lease to stop waiting gives back the permits
// handed off meanwhile (the head may have got its own from Redis), and
// takes the instance out of the wait queue if it is still in it.
func (s *Semaphore) done(who *reentrant.Owner) {
	s.mu.Lock()
	s.needers--
	var spare []*permit
	last := s.needers == 0
	leave := last && s.queued
	if last {
		spare, s.spare, s.queued = s.spare, nil, false
	}
	s.mu.Unlock()
	if leave {
		s.leaveQueue()
	}
	if who != nil {
		_ = s.head.Unlock(*who)
	}
	for _, p := range spare {
		h := p.h.Load()
		h.retire()
		s.releaseLater(h.token)
	}
}

// obtain gets the head a permit: one handed off by a lease of this
// registry, or one from Redis, trying semacquire.lua until it grants one,
// sleeping between tries as the script says, and waking early when release
// messages say its turn may have come or a permit is handed off. The
// caller owns head.
func (s *Semaphore) obtain(ctx context.Context, ttl time.Duration) (p *permit, waited bool, err error) {
	r := s.reg
	var (
		bo      backoff
		lastErr error
	)
	s.mu.Lock()
	if !s.queued { // the last head's entry is gone: no turn to wait for
		s.turn.waitUntil = 0
	}
	s.mu.Unlock()
	if left := s.turn.waitUntil - r.now(); s.turn.waitUntil > 0 {
		// The last head's acquisition queued the instance again: wait for
		// its turn before trying.
		s.turn.waitUntil = 0
		waited = true
		if left > 0 {
			if err := r.await(ctx, s.wake, time.Duration(left), s.turn.mark, s.turn.after, s.hasSpare); err != nil {
				return nil, waited, waitErr(s.key, err, nil)
			}
		}
	}
	for {
		if p := s.takeSpare(ctx, ttl); p != nil {
			return p, waited, nil
		}
		if s.holdsAll() {
			// Every permit is held by this registry's leases: no attempt
			// can succeed, and the next release hands one over. Try Redis
			// after a poll interval all the same (a lease that was lost
			// and never released holds nothing there).
			waited = true
			if err := r.await(ctx, s.wake, r.cfg.idle, s.wake.mark(), everyTurn, s.freedLocally); err != nil {
				return nil, waited, waitErr(s.key, err, lastErr)
			}
			if p := s.takeSpare(ctx, ttl); p != nil {
				return p, waited, nil
			}
		}
		mark := s.wake.mark()
		h := hint{waits: true, waiter: s.waiter, deaf: !s.pubsub || s.deaf(), spread: rand.N(r.cfg.idle/4 + 1), rtt: s.turn.rtt}
		p, g, err := s.attempt(ctx, ttl, h, true, mark)
		switch {
		case err == nil && p != nil:
			return p, waited, nil
		case err == nil:
			waited = true
			bo.reset()
			if s.pubsub {
				r.subscriber.listen(s.wake)
			}
		default:
			if lastErr == nil || ctxEnded(ctx) == nil {
				lastErr = err
			}
			if end := ctxEnded(ctx); end != nil {
				return nil, waited, waitErr(s.key, end, lastErr)
			}
			if !isTransient(err) {
				return nil, waited, wrapKey("acquiring", s.key, err)
			}
			r.log.Warn("lockyard: semaphore acquire failed, retrying", "key", s.key, "err", err)
			g = grant{sleep: bo.delay(), after: -1}
		}
		delay := g.sleep
		if delay < 0 {
			delay = pollDelay(r.cfg.idle, -1)
		}
		if err := r.await(ctx, s.wake, delay, mark, g.after, s.hasSpare); err != nil {
			return nil, waited, waitErr(s.key, err, lastErr)
		}
	}
}

// setQueued records, for the head, whether its attempt left the
// instance's entry in line.
func (s *Semaphore) setQueued(q bool) {
	s.mu.Lock()
	s.queued = q
	s.queuedAt++
	s.mu.Unlock()
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

// deaf reports whether this instance is not the cached one (evicted, and
// kept by its caller): the subscriber wakes the cached one, so this one
// queues as a poller.
func (s *Semaphore) deaf() bool {
	e, ok := s.reg.cache.peek(s.name)
	return !ok || e != cached(s)
}

// attempt runs semacquire.lua once: a new permit, or nil and the grant
// that says when to try again. waits: the caller queues if it fails (the
// head of a registry's waiting leases); then, if more leases of the
// registry wait behind it, a successful attempt queues the instance again
// for them.
//
// mark is the waker's count before the attempt.
func (s *Semaphore) attempt(ctx context.Context, ttl time.Duration, h hint, waits bool, mark int64) (*permit, grant, error) {
	r := s.reg
	token := r.newToken()
	more := false
	if waits {
		s.mu.Lock()
		more = s.needers > 1
		s.mu.Unlock()
	}
	sent := r.now()
	g, err := r.sem.acquire(ctx, s.key, token, ttl, s.permits, h, more)
	switch {
	case err != nil:
		if isAmbiguous(err) {
			s.releaseLater(token) // the script may have added the permit
		}
		return nil, unknown, err
	case !g.ok:
		if waits {
			s.turn.rtt = time.Duration(r.now() - sent)
			s.setQueued(true)
		}
		return nil, g.grant, nil
	}
	if waits {
		s.setQueued(g.queued)
	}
	if g.queued { // queued again for the leases behind: the next head waits for its turn
		s.turn.waitUntil, s.turn.mark, s.turn.after = sent+int64(g.sleep), mark, g.after
		if s.pubsub {
			r.subscriber.listen(s.wake) // its turn is announced by a release message
		}
	}
	deadline := validUntil(sent, ttl)
	if r.now() >= deadline { // the reply came too late to be of use
		s.releaseLater(token)
		return nil, grant{sleep: 0, after: -1}, nil
	}
	p := &permit{since: sent, lastCmd: sent}
	s.install(p, newHold(&r.core, s.key, token, g.fence, ttl, deadline, p, r.sem))
	return p, g.grant, nil
}

// install makes h the hold of p, tracked by the watchdog.
func (s *Semaphore) install(p *permit, h *hold) {
	p.h.Store(h)
	s.reg.watchdog.track(h)
}

// leaveQueue takes the instance out of the wait queue in the background,
// so that no turn is given to it.
func (s *Semaphore) leaveQueue() {
	r := s.reg
	leave := func(ctx context.Context) {
		if err := r.sem.leave(ctx, s.key, s.waiter); err != nil {
			r.log.Debug("lockyard: leaving the wait queue failed; the entry lapses", "key", s.key, "err", err)
		}
	}
	r.soon(leave)
}

// releaseLater gives back, in the background and best effort, a permit
// that this registry may hold with token without knowing it; after Close,
// at once, within a short bound (the permit would otherwise stay taken
// for its TTL).
func (s *Semaphore) releaseLater(token string) {
	r := s.reg
	r.soon(func(ctx context.Context) {
		_, _, _ = r.retried(ctx, func(ctx context.Context) (bool, error) {
			done, _, err := r.sem.release(ctx, s.key, token, s.permits)
			return done, err
		})
	})
}
