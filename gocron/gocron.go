// Package gocronlock plugs lockyard into gocron
// (github.com/go-co-op/gocron/v2), the scheduler of periodic jobs, as its
// distributed Locker or Elector. Its import path is
// github.com/lockyard/lockyard/gocron, a module of its own, so that the
// lockyard library never downloads gocron.
//
// Locker: every replica runs the scheduler, and each run of a job first
// takes the job's key with registry.TryAcquire: the replica that gets it
// runs the job, the others skip that run.
//
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(gocronlock.NewLocker(reg)))
//
// Elector: only the leader, the replica that holds a lease on one key
// (renewed by the Elector), runs jobs; if it dies, another takes over once
// its key expires (DefaultElectorTTL, 10s). A graceful shutdown resigns
// at once:
//
//	el := gocronlock.NewElector(context.Background(), reg, "scheduler")
//	s, _ := gocron.NewScheduler(gocron.WithDistributedElector(el))
//	...
//	_ = s.Shutdown()          // waits for the running jobs
//	_ = el.Close(shutdownCtx) // resigns: another replica leads at once
//
// The Elector resigns when the ctx given to NewElector ends: not the ctx
// that a SIGTERM cancels, or it resigns before the scheduler's Shutdown has
// waited for the running jobs, and another replica runs jobs beside them.
//
// Jobs are named by gocron.WithName; jobs of one function and no name
// share one name, and so one Locker key. A job longer than its interval
// overlaps itself on the leader unless gocron.WithSingletonMode says
// otherwise.
//
// # Time splay
//
// Replicas' ticks for the same run come a few milliseconds apart (timers,
// clocks). A job faster than that splay would run once per replica if its
// key were released when it returns (gocron issue #841): the Locker keeps
// the key taken until a minimum time after the run started (WithMinHold,
// 500ms by default), with Lease.ReleaseAfter, so that the later replicas'
// attempts for the same tick fail. Keep it above the splay between your
// replicas' clocks and below the shortest interval of the jobs it locks:
// a run whose tick comes while the key is still held is skipped on every
// replica.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/lockyard/lockyard/registry"
)

// ErrNotLeader is returned by the Elector's IsLeader on a replica that does
// not lead.
var ErrNotLeader = errors.New("lockyard: gocron: this replica is not the leader")

// DefaultMinHold is the Locker's default minimum hold (WithMinHold).
const DefaultMinHold = 500 * time.Millisecond

type config struct {
	ttl     time.Duration
	minHold time.Duration
	err     error
}

// Option configures a Locker or an Elector.
type Option func(*config)

// WithTTL sets the TTL of the leases. For the Locker, 0 (the default) is
// the registry's expireAfter, and a job that runs longer than its TTL
// needs a registry made WithAutoRenew, or it loses its key while it runs.
// For the Elector, 0 is DefaultElectorTTL; it renews its lease itself.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if ttl < 0 || (ttl > 0 && ttl < registry.MinExpireAfter) {
			c.err = fmt.Errorf("%w: gocron: WithTTL(%v) is below MinExpireAfter (%v)", registry.ErrInvalidConfig, ttl, registry.MinExpireAfter)
		}
		c.ttl = ttl
	}
}

// WithMinHold sets how long the Locker keeps a job's key after the run
// started, at least (DefaultMinHold; 0 releases the key when the job
// returns). See Time splay in the package doc.
func WithMinHold(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > registry.MaxDuration {
			c.err = fmt.Errorf("%w: gocron: WithMinHold(%v) is out of range [0, MaxDuration]", registry.ErrInvalidConfig, d)
		}
		c.minHold = d
	}
}

func newConfig(opts []Option) config {
	c := config{minHold: DefaultMinHold}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// locker is a gocron.Locker on a registry.
type locker struct {
	reg *registry.Registry
	cfg config
}

// NewLocker returns a gocron.Locker that takes a job's key (the job's name)
// with reg.TryAcquire for each run, and releases it when the run ends, or
// later (WithMinHold). A bad option or a nil registry makes every Lock
// return an error matching registry.ErrInvalidConfig.
func NewLocker(reg *registry.Registry, opts ...Option) gocron.Locker {
	l := &locker{reg: reg, cfg: newConfig(opts)}
	if reg == nil && l.cfg.err == nil {
		l.cfg.err = fmt.Errorf("%w: gocron: nil registry", registry.ErrInvalidConfig)
	}
	return l
}

// Lock takes key for one run of the job: registry.ErrNotObtained (and the
// run is skipped) if another replica has it.
func (l *locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if l.cfg.err != nil {
		return nil, l.cfg.err
	}
	le, err := l.reg.TryAcquire(ctx, key, l.cfg.ttl)
	if err != nil {
		return nil, err
	}
	return &lock{le: le, until: time.Now().Add(l.cfg.minHold)}, nil
}

// lock is one run's hold of a job's key.
type lock struct {
	le    *registry.Lease
	until time.Time // the key stays taken until then
}

// Unlock ends the run's hold: the key is deleted, or, before the minimum
// hold is over, left in Redis until it is.
func (k *lock) Unlock(ctx context.Context) error {
	return k.le.ReleaseAfter(ctx, time.Until(k.until))
}

// DefaultElectorTTL is the TTL of the Elector's lease unless WithTTL sets
// another: a leader that crashes holds its key at most this long.
const DefaultElectorTTL = 10 * time.Second

// resignTimeout bounds the release of the leader's key when the Elector
// stops.
const resignTimeout = 5 * time.Second

// Elector is a gocron.Elector on a registry: IsLeader is nil while this
// replica leads, that is, holds a lease on its key, which the Elector
// renews itself every third of its TTL (the registry needs no
// WithAutoRenew). A replica that loses its lease (a renewal that finds the
// key gone, or a pause past the TTL) campaigns again at once.
type Elector struct {
	reg  *registry.Registry
	key  string
	ttl  time.Duration
	err  error // a configuration error, returned by every IsLeader
	stop context.CancelFunc
	done chan struct{} // closed when the campaign has ended and the key is released

	// mu guards the following.
	mu     sync.Mutex
	lease  *registry.Lease // the lease of the current term; nil when not leading
	last   error           // the error that last ended a campaign, nil if none
	resign error           // the release's error when the campaign ended
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector that campaigns for key in a goroutine until
// ctx ends, Close is called, or reg is closed (reg.Done); a Redis error other than a
// transient one (which is retried) ends a campaign, and it campaigns again
// a second later. Its lease lives WithTTL (DefaultElectorTTL, 10s), so
// that a leader that crashes costs that long at most. A bad option,
// registry or key makes every IsLeader return an error matching
// registry.ErrInvalidConfig (or ErrInvalidKey).
//
// When it stops, the leader resigns: its key is released, and another
// replica leads at once. Stop it with Close after the scheduler's Shutdown
// (which waits for the running jobs), and before the process exits: Close
// returns once the key is released.
func NewElector(ctx context.Context, reg *registry.Registry, key string, opts ...Option) *Elector {
	cfg := newConfig(opts)
	e := &Elector{reg: reg, key: key, ttl: cfg.ttl, err: cfg.err, done: make(chan struct{})}
	if e.ttl == 0 {
		e.ttl = DefaultElectorTTL
	}
	if e.err == nil && reg == nil {
		e.err = fmt.Errorf("%w: gocron: nil registry", registry.ErrInvalidConfig)
	}
	if e.err == nil {
		_, e.err = reg.Obtain(key) // the key's own errors, at once
	}
	if e.err != nil {
		e.stop = func() {}
		close(e.done)
		return e
	}
	var cctx context.Context
	cctx, e.stop = context.WithCancel(ctx)
	go e.campaign(cctx)
	return e
}

// campaign acquires the lease and leads, again and again, until ctx ends or
// the registry is closed.
func (e *Elector) campaign(ctx context.Context) {
	defer close(e.done)
	for ctx.Err() == nil {
		le, err := e.reg.Acquire(ctx, e.key, e.ttl)
		switch {
		case err == nil:
			e.lead(ctx, le)
			continue
		case ctx.Err() != nil || errors.Is(err, registry.ErrClosed):
			return
		}
		e.mu.Lock()
		e.last = err
		e.mu.Unlock()
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-e.reg.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// lead renews le every third of the TTL until it is lost, or until ctx
// ends or the registry is closed: then it resigns (releases the key).
func (e *Elector) lead(ctx context.Context, le *registry.Lease) {
	e.mu.Lock()
	e.lease, e.last = le, nil
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.lease = nil
		e.mu.Unlock()
	}()
	t := time.NewTicker(e.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
		case <-e.reg.Done():
		case <-le.Lost():
			_ = le.Release(context.Background()) // frees the local queue; the key is another's or gone
			return
		case <-t.C:
			// A failure that is not a loss is tried again a period later;
			// a lease not renewed in time is lost (le.Lost closes).
			_ = le.Renew(ctx, e.ttl)
			continue
		}
		rctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
		err := le.Release(rctx)
		cancel()
		e.mu.Lock()
		e.resign = err
		e.mu.Unlock()
		return
	}
}

// Leader returns who leads now, read from Redis by any replica: the
// holder of the leader key, with its registry id, its label
// (registry.WithLabel: how a follower names the leader) and the TTL left;
// false when no one leads. Advisory, as registry.Inspect. A configuration
// error is returned as by IsLeader.
func (e *Elector) Leader(ctx context.Context) (registry.HolderInfo, bool, error) {
	if e.err != nil {
		return registry.HolderInfo{}, false, e.err
	}
	info, err := e.reg.Inspect(ctx, e.key)
	if err != nil || len(info.Holders) == 0 {
		return registry.HolderInfo{}, false, err
	}
	return info.Holders[0], true, nil
}

// IsLeader returns nil while this replica leads, else ErrNotLeader (joined
// with the error that last ended a campaign, if any).
func (e *Elector) IsLeader(context.Context) error {
	if e.err != nil {
		return e.err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease != nil {
		select {
		case <-e.lease.Lost():
		default:
			return nil
		}
	}
	if e.last != nil {
		return errors.Join(ErrNotLeader, e.last)
	}
	return ErrNotLeader
}

// Close stops campaigning and, if this replica leads, resigns: it returns
// once the key is released (the release's error, if any), or when ctx ends
// (ctx.Err(); the release goes on in the background, bounded); once the
// campaign has ended it returns its result whatever ctx says. Another
// replica leads as soon as it sees the release. Close is safe to call more
// than once.
func (e *Elector) Close(ctx context.Context) error {
	e.stop()
	select {
	case <-e.done:
	default: // not done yet: wait, but no longer than ctx
		select {
		case <-e.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resign
}
