package core

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/wire"
)

// Core is what every acquisition of a registry shares, whatever kind of
// lock made it: the clock, the executor, the watchdog, the counters, the group
// of background goroutines and the log (as etcd's concurrency.Session is
// shared by its Mutex and Election). A Registry is a Core plus its key
// layout, its options, the mutex protocol and its cache of locks; a hold
// (hold.go) knows its Core and its kind's renewer, never its lock.
type Core struct {
	Epoch    time.Time     // origin of now, read on the monotonic clock
	ClientID string        // random UUID, the first part of every token of this registry
	seq      atomic.Uint64 // acquisitions, the second part of every token
	// instances numbers the waiter ids of lock instances (waiter.go).
	instances atomic.Uint64
	Exec      Executor // runs the calls of every lock kind
	Watchdog  watchdog
	Counters  *Counters
	BG        *group
	Log       *slog.Logger
	// OnRenewalFailed, if set, is told of each renewal that failed (the
	// hold stays valid until its deadline), and OnLost of each hold lost,
	// once, when Stats counts it: registry.Observer. Both may be called
	// with a hold's Renewing held.
	OnRenewalFailed func(h *Hold, err error)
	OnLost          func(h *Hold)
	// ServerLost, if set, reports whether the server lost this registry's
	// keys since it last wrote them (its label is gone: a restart without
	// persistence, a failover, FLUSHALL): a key found gone at a retried
	// release may then have been lost, not given back (Hold.ReleaseErr).
	ServerLost func(ctx context.Context) bool
}

// Now returns the registry clock: nanoseconds since New, on the monotonic clock.
func (c *Core) Now() int64 { return int64(time.Since(c.Epoch)) }

// NewToken returns the lock value of a new acquisition.
func (c *Core) NewToken() string { return wire.NewToken(c.ClientID, c.seq.Add(1)) }

// NewPermitToken returns a new token for a semaphore's permit, ending
// with count (wire.CountSuffix).
func (c *Core) NewPermitToken(count string) string {
	return wire.NewPermitToken(c.ClientID, c.seq.Add(1), count)
}
