// Package election elects one leader among the replicas of a service, on
// top of registry leases: the leader is the replica whose registry holds
// the lease of the election key. The others wait in Acquire (woken by
// pub/sub with PubSubLock, else polling) and take over when the leader
// resigns, or when its key expires because it died or stalled.
//
// The registry must be made WithAutoRenew, so that a leader keeps its lease
// for as long as it runs. A leader that stalls past its TTL (a GC pause, a
// stopped VM) loses the lease and may resume believing it leads: make its
// writes carry the lease's fencing token (registry.WithFencing) and check
// Lost (or the context of Run) before each one.
package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/registry"
)

// Election is one replica's part in the election of a leader for a key.
// It is safe for concurrent use.
type Election struct {
	reg *registry.Registry
	key string
	ttl time.Duration

	// mu guards the following.
	mu    sync.Mutex
	lease *registry.Lease         // the leadership, while this replica leads
	end   context.CancelCauseFunc // ends the context of Run's lead, while it runs
}

// ErrResigned is the cause of the end of Run's lead context when Resign
// ended the leadership.
var ErrResigned = errors.New("lockyard: election: resigned")

// New returns the election of key on reg, whose leases live ttl (0: the
// registry's expireAfter). It returns an error matching
// registry.ErrInvalidConfig if reg is nil or not made WithAutoRenew, or ttl
// is out of range, and registry.ErrInvalidKey for a bad key. It sends
// nothing.
func New(reg *registry.Registry, key string, ttl time.Duration) (*Election, error) {
	switch {
	case reg == nil:
		return nil, fmt.Errorf("%w: election: nil registry", registry.ErrInvalidConfig)
	case !reg.AutoRenew():
		return nil, fmt.Errorf("%w: election: the registry must be made WithAutoRenew, or a leader loses its lease a TTL after it won", registry.ErrInvalidConfig)
	case ttl < 0 || (ttl > 0 && ttl < registry.MinExpireAfter):
		return nil, fmt.Errorf("%w: election: ttl %v is below MinExpireAfter (%v)", registry.ErrInvalidConfig, ttl, registry.MinExpireAfter)
	}
	if _, err := reg.Obtain(key); err != nil {
		return nil, err
	}
	return &Election{reg: reg, key: key, ttl: ttl}, nil
}

// Campaign waits until this replica leads, or ctx ends, and returns the
// lease of its leadership. It fails as registry.Acquire does (ErrClosed
// after Close, ctx's error when ctx ends). Leading a second time without
// resigning waits for the first leadership, like a second Acquire.
func (e *Election) Campaign(ctx context.Context) (*registry.Lease, error) {
	le, err := e.reg.Acquire(ctx, e.key, e.ttl)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease = le
	e.mu.Unlock()
	return le, nil
}

// Resign ends this replica's leadership, if it leads: the context of
// Run's lead ends (cause ErrResigned), then the lease is released, even if
// ctx is done, and a waiting replica takes over. It returns the release's
// error: registry.ErrLockLost if the leadership had been lost already.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	le, end := e.lease, e.end
	e.lease = nil
	e.mu.Unlock()
	if end != nil {
		end(ErrResigned)
	}
	if le == nil {
		return nil
	}
	return le.Release(ctx)
}

// Leader returns who leads now, read from Redis by any replica (leading,
// campaigning, or neither): the holder of the election key, with its
// registry id, its label (registry.WithLabel: how a follower names the
// leader) and the TTL left. It reports false when no one leads. It is
// advisory, as registry.Inspect: the leader may change as soon as it is
// read.
func (e *Election) Leader(ctx context.Context) (registry.HolderInfo, bool, error) {
	info, err := e.reg.Inspect(ctx, e.key)
	if err != nil || len(info.Holders) == 0 {
		return registry.HolderInfo{}, false, err
	}
	return info.Holders[0], true, nil
}

// Leading returns the lease of this replica's leadership, or nil if it
// does not lead: it never won, it resigned, or the lease was lost.
func (e *Election) Leading() *registry.Lease {
	e.mu.Lock()
	le := e.lease
	e.mu.Unlock()
	if le == nil {
		return nil
	}
	select {
	case <-le.Lost():
		return nil
	default:
		return le
	}
}

// Run campaigns until ctx ends. Each time this replica wins, it calls lead
// with the lease and a context that ends when the leadership is lost
// (cause registry.ErrLockLost), Resign ends it (ErrResigned), or ctx
// ends; when lead returns, Run resigns
// and, unless lead failed or ctx ended, campaigns again. lead should
// return when its context ends. Run returns ctx's error once ctx ends;
// lead's error, unless the leadership was lost or resigned meanwhile
// (which explains it); or the campaign's (registry.ErrClosed after Close).
//
// Before each write that only the leader may make, lead should check
// lease.Lost(), not its context: the context ends when the loss has been
// seen, which after a pause (GC, SIGSTOP) can come about a millisecond
// after Lost() closes. Fence the write with lease.Token() as well.
func (e *Election) Run(ctx context.Context, lead func(ctx context.Context, lease *registry.Lease) error) error {
	for {
		le, err := e.Campaign(ctx)
		if err != nil {
			return err
		}
		if err := e.lead(ctx, le, lead); err != nil {
			return err
		}
	}
}

// lead runs lead for the leadership le, then resigns. It returns lead's
// error, unless the leadership was lost.
func (e *Election) lead(ctx context.Context, le *registry.Lease, lead func(context.Context, *registry.Lease) error) error {
	lctx, cancel := context.WithCancelCause(ctx)
	e.mu.Lock()
	e.end = cancel
	e.mu.Unlock()
	watched := make(chan struct{})
	go func() { // ends lctx at the loss; stops when lead has returned
		defer close(watched)
		select {
		case <-le.Lost():
			cancel(fmt.Errorf("%w: election: leadership of %q lost", registry.ErrLockLost, e.key))
		case <-lctx.Done():
		}
	}()
	err := lead(lctx, le)
	cause := context.Cause(lctx)
	explained := errors.Is(cause, registry.ErrLockLost) || errors.Is(cause, ErrResigned)
	cancel(nil)
	<-watched
	e.mu.Lock()
	e.end = nil
	mine := e.lease == le
	if mine {
		e.lease = nil
	}
	e.mu.Unlock()
	var rerr error
	if mine { // else Resign released it
		rerr = le.Release(context.WithoutCancel(ctx))
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && !explained:
		return core.Join(err, rerr)
	}
	return nil
}
