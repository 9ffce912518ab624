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
// Elector: only the leader, the replica that holds an auto-renewed lease on
// one key, runs jobs; if it dies, another takes over once its key expires.
//
//	s, _ := gocron.NewScheduler(gocron.WithDistributedElector(gocronlock.NewElector(ctx, reg, "scheduler")))
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

	"github.com/lockyard/lockyard/election"
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

// WithTTL sets the TTL of the leases (0, the default: the registry's
// expireAfter). A job that runs longer than its TTL needs a registry made
// WithAutoRenew, or it loses its key while it runs.
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

// elector is a gocron.Elector on an election.
type elector struct {
	e   *election.Election
	err error // a configuration error, returned by every IsLeader

	// mu guards the following.
	mu   sync.Mutex
	last error // the error that last ended a campaign, nil if none
}

// NewElector returns a gocron.Elector whose IsLeader returns nil while this
// replica leads the election of key: it holds the lease of key, which reg
// renews (reg must be made WithAutoRenew). It campaigns in a goroutine
// until ctx ends or reg is closed; after a Redis error that ends a
// campaign (other than a transient one, which is retried), it campaigns
// again a second later. A bad option or registry makes every IsLeader
// return an error matching registry.ErrInvalidConfig.
//
// When ctx ends the leader resigns at once and another replica leads: end
// it after the scheduler's Shutdown has waited for the running jobs, or
// their runs may overlap the next leader's.
func NewElector(ctx context.Context, reg *registry.Registry, key string, opts ...Option) gocron.Elector {
	cfg := newConfig(opts)
	if cfg.err != nil {
		return &elector{err: cfg.err}
	}
	e, err := election.New(reg, key, cfg.ttl)
	if err != nil {
		return &elector{err: err}
	}
	el := &elector{e: e}
	go el.campaign(ctx)
	return el
}

// campaign runs the election until ctx ends or the registry is closed.
func (el *elector) campaign(ctx context.Context) {
	for {
		err := el.e.Run(ctx, func(lctx context.Context, _ *registry.Lease) error {
			el.mu.Lock()
			el.last = nil // this campaign won
			el.mu.Unlock()
			<-lctx.Done() // lead until the loss or the end
			return nil
		})
		if ctx.Err() != nil || errors.Is(err, registry.ErrClosed) {
			return
		}
		el.mu.Lock()
		el.last = err
		el.mu.Unlock()
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// IsLeader returns nil while this replica leads, else ErrNotLeader (joined
// with the error that last ended a campaign, if any).
func (el *elector) IsLeader(context.Context) error {
	if el.err != nil {
		return el.err
	}
	if el.e.Leading() != nil {
		return nil
	}
	el.mu.Lock()
	defer el.mu.Unlock()
	if el.last != nil {
		return errors.Join(ErrNotLeader, el.last)
	}
	return ErrNotLeader
}
