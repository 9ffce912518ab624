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
// The leases of one registry queue locally first, in FIFO order, in a
// local semaphore of Permits: at most that many of its goroutines wait in
// Redis at once. Waiters of every registry take turns in arrival order in
// the key's wait queue (the lock's, see lua/prelude.lua), woken by a
// release message (PubSubLock) or by polling (SpinLock). A permit released
// while another lease of the same registry waits passes to it, without a
// round trip or with one (as a lock's hold is handed off), unless waiters
// of other registries are in line.
//
// Processes that disagree on Permits (a rolling change of the limit) each
// admit themselves only while fewer permits than their own count are held:
// during the change at most the larger count hold, and a process with the
// smaller count waits until fewer than its count hold.
//
// A Semaphore needs one Redis master (a single node, Sentinel, or Cluster:
// its keys share one hash slot) and the TIME command; a Redlock registry or
// one made WithReplicaAck refuses it with ErrInvalidConfig.
type Semaphore struct {
	reg       *Registry
	key, name string
	permits   int
	local     *reentrant.Mutex // of size permits: one unit per lease
	lastUsed  atomic.Int64
	pubsub    bool

	mu     sync.Mutex
	wakers map[*waker]struct{}  // of the acquisitions that wait in Redis
	live   map[*permit]struct{} // the permits held in Redis
	spare  []*permit            // handed off by a lease, for the next local owner
}

// permit is one permit held in Redis: a token in the semaphore's sorted
// set, and the hold the watchdog renews. It passes from lease to lease of
// one registry (a hand-off), who changing each time; it is the holder of
// its holds.
type permit struct {
	s       *Semaphore
	who     atomic.Int64 // the local owner (reentrant.Owner) that holds it now
	h       atomic.Pointer[hold]
	since   int64 // registry clock: obtained in Redis (the run of local holds began)
	lastCmd int64 // registry clock: the last command on it
	passes  int   // free passes since the last command
	// ending: p is being handed to another local owner, which is not
	// revocable until it has taken p (inherit).
	ending atomic.Bool
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
	s := &Semaphore{reg: r, key: key, permits: permits, local: reentrant.NewWeighted(int64(permits)),
		pubsub: r.cfg.lockType == PubSubLock, wakers: map[*waker]struct{}{}, live: map[*permit]struct{}{}}
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
func (s *Semaphore) busy() bool       { return s.local.Busy() }
func (s *Semaphore) used() int64      { return s.lastUsed.Load() }

// signal counts k release messages for every acquisition waiting in
// Redis: each counts its own turn.
func (s *Semaphore) signal(k int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.wakers {
		w.signal(k)
	}
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
	start := r.now()
	who := reentrant.NewOwner()
	req := reentrant.Request{Mode: reentrant.Weighted, Weight: 1, TTL: ttl}
	how := reentrant.Fresh
	if waits {
		var err error
		how, err = s.local.Lock(ctx, r.bg.closed, (*semHook)(s), req, who)
		switch {
		case errors.Is(err, reentrant.ErrAborted):
			return nil, ErrClosed
		case err != nil:
			return nil, wrapKey("waiting for", s.key, err)
		}
	} else if ok, _, _ := s.local.TryLock(req, who); !ok {
		return nil, fmt.Errorf("%w: every permit of %q is held in this registry", ErrNotObtained, s.key)
	}
	s.touch()
	if p := s.inherit(ctx, ttl, who); p != nil {
		r.stats.acquired(true, time.Duration(r.now()-start))
		return &Lease{of: s, who: who, h: p.h.Load()}, nil
	}
	p, waited, err := s.obtain(ctx, ttl, waits)
	if err != nil {
		s.unlockLocal(who)
		return nil, err
	}
	p.who.Store(int64(who))
	if waits {
		r.stats.acquired(waited || how == reentrant.Queued, time.Duration(r.now()-start))
	} else {
		r.stats.acquired(false, -1)
	}
	return &Lease{of: s, who: who, h: p.h.Load()}, nil
}

// obtain runs semacquire.lua until it grants a permit (or once, unless
// waits), sleeping between tries as the script says, and waking early when
// release messages say the caller's turn may have come.
func (s *Semaphore) obtain(ctx context.Context, ttl time.Duration, waits bool) (p *permit, waited bool, err error) {
	r := s.reg
	h := hint{waits: waits, waiter: r.clientID + "/" + strconv.FormatUint(r.instances.Add(1), 10)}
	var w *waker
	if s.pubsub && waits {
		w = newWaker(PubSubLock)
		s.mu.Lock()
		s.wakers[w] = struct{}{}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.wakers, w)
			s.mu.Unlock()
		}()
	}
	var (
		bo      backoff
		lastErr error
		queued  bool
	)
	defer func() {
		if err != nil && queued {
			s.leaveQueue(h.waiter)
		}
	}()
	for {
		mark := w.mark()
		h.spread = rand.N(r.cfg.idle/4 + 1)
		token := r.newToken()
		sent := r.now()
		g, err := r.sem.acquire(ctx, s.key, token, ttl, s.permits, h)
		switch {
		case err == nil && g.ok:
			if deadline := validUntil(sent, ttl); r.now() < deadline {
				return s.begin(token, g.fence, ttl, sent, deadline), waited, nil
			}
			s.releaseLater(token) // the reply came too late to be of use
			g = grant{sleep: 0, after: -1}
		case err == nil:
			h.rtt = time.Duration(r.now() - sent)
			waited = true
			if !waits {
				return nil, false, fmt.Errorf("%w: every permit of %q is held, or is the turn of a waiter in line", ErrNotObtained, s.key)
			}
			queued = true
			bo.reset()
			r.subscriber.listen(w)
		default:
			if isAmbiguous(err) {
				s.releaseLater(token) // the script may have added the permit
			}
			if lastErr == nil || ctxEnded(ctx) == nil {
				lastErr = err
			}
			if end := ctxEnded(ctx); end != nil {
				return nil, waited, s.waitErr(end, lastErr)
			}
			if !waits || !isTransient(err) {
				return nil, waited, wrapKey("acquiring", s.key, err)
			}
			r.log.Warn("lockyard: semaphore acquire failed, retrying", "key", s.key, "err", err)
			g = grant{sleep: bo.delay(), after: -1}
		}
		delay := g.sleep
		if delay < 0 {
			delay = pollDelay(r.cfg.idle, -1)
		}
		if err := r.await(ctx, w, delay, mark, g.after); err != nil {
			return nil, waited, s.waitErr(err, lastErr)
		}
	}
}

// begin makes a new permit held in Redis with token: the watchdog renews
// it, and its timer watches its validity.
func (s *Semaphore) begin(token string, fence int64, ttl time.Duration, sent, deadline int64) *permit {
	r := s.reg
	p := &permit{s: s, since: sent, lastCmd: sent}
	s.install(p, newHold(&r.core, s.key, token, fence, ttl, deadline, p, r.sem))
	s.mu.Lock()
	s.live[p] = struct{}{}
	s.mu.Unlock()
	return p
}

// install makes h the hold of p, tracked and guarded.
func (s *Semaphore) install(p *permit, h *hold) {
	p.h.Store(h)
	s.reg.watchdog.track(h)
	h.guard()
}

// waitErr is the error of a wait ended by end, as RedisLock.waitErr.
func (s *Semaphore) waitErr(end, lastErr error) error {
	if lastErr == nil || lastErr == end {
		return wrapKey("waiting for", s.key, end)
	}
	return wrapKey("waiting for", s.key, fmt.Errorf("%w (last error: %w)", end, lastErr))
}

// leaveQueue takes waiter out of the wait queue in the background, so that
// no turn is given to it.
func (s *Semaphore) leaveQueue(waiter string) {
	r := s.reg
	leave := func(ctx context.Context) {
		if err := r.sem.leave(ctx, s.key, waiter); err != nil {
			r.log.Debug("lockyard: leaving the wait queue failed; the entry lapses", "key", s.key, "err", err)
		}
	}
	if !r.bg.spawn(func() { leave(r.bg.ctx) }) {
		ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.commandTimeout, closeLeave))
		defer cancel()
		leave(ctx)
	}
}

// releaseLater gives back, in the background and best effort, a permit
// that this registry may hold with token without knowing it.
func (s *Semaphore) releaseLater(token string) {
	r := s.reg
	r.bg.spawn(func() {
		_, _, _ = r.retried(r.bg.ctx, func(ctx context.Context) (bool, error) {
			done, _, err := r.sem.release(ctx, s.key, token, s.permits)
			return done, err
		})
	})
}

// unlockLocal frees who's unit of the local semaphore.
func (s *Semaphore) unlockLocal(who reentrant.Owner) {
	s.touch()
	if err := s.local.Unlock(who); err != nil && !errors.Is(err, reentrant.ErrRevoked) {
		panic("lockyard: internal error: local semaphore not held: " + err.Error())
	}
}
