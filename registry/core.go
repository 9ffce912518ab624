package registry

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/wire"
)

// core is what every acquisition of a registry shares, whatever kind of
// lock made it: the clock, the executor, the watchdog, the counters, the group
// of background goroutines and the log (as etcd's concurrency.Session is
// shared by its Mutex and Election). A Registry is a core plus its key
// layout, its options, the mutex protocol and its cache of locks; a hold
// (hold.go) knows its core and its kind's renewer, never its lock.
type core struct {
	epoch    time.Time     // origin of now, read on the monotonic clock
	clientID string        // random UUID, the first part of every token of this registry
	seq      atomic.Uint64 // acquisitions, the second part of every token
	exec     executor      // runs the calls of every lock kind
	watchdog watchdog
	stats    *stats
	bg       *group
	log      *slog.Logger
}

// now returns the registry clock: nanoseconds since New, on the monotonic clock.
func (c *core) now() int64 { return int64(time.Since(c.epoch)) }

// newToken returns the lock value of a new acquisition.
func (c *core) newToken() string { return wire.NewToken(c.clientID, c.seq.Add(1)) }
