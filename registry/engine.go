package registry

import (
	"sync/atomic"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// engine is what the lock kinds of a registry share, and all that they
// know of it: a kind holds the engine, never the Registry, which assembles
// the engine once (build) and serves the public API on it. Its parts are
// the core that every acquisition shares (internal/core: the clock, the
// executor, the watchdog, the counters, the waiting loop and the group of
// background goroutines), where keys live (layout), the options, the
// cache of lock instances and the subscribers that wake their waiters. It
// knows no kind: each kind's protocol (its scripts) is held by the kind's
// instances, and the Registry makes it.
type engine struct {
	core   core.Core
	layout wire.Layout
	cfg    config
	labels labeller  // publishes the registry's label (label.go)
	obs    observing // Stats and the Observer (observe.go)

	cache      cache
	watch      watchers    // waiters on several keys (watch.go)
	subscriber *subscriber // release messages
	turns      *subscriber // semaphore turns, told to this registry alone
	eviction   eviction
	// grantSeq numbers the refused attempts that a script may grant a
	// permit to (Semaphore.granted).
	grantSeq atomic.Uint64
}
