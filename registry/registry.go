package registry

import (
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/lockyard/lockyard/internal/core"

	"github.com/lockyard/lockyard/internal/wire"
)

// Registry hands out one *RedisLock per key under a key prefix, the
// registryKey. It is safe for concurrent use. Create it with New and Close it
// when done; Close stops its background goroutines but deletes no key.
//
// A registry is built from parts, each with its own file and its own
// locking: the core that every acquisition shares (internal/core: the executor,
// where locks live in Redis, the watchdog, the counters, and the group of
// background goroutines that Close stops), the cache of locks and the
// subscribers.
type Registry struct {
	engine
	mutex *mutexProto // the protocol of RedisLock and its Leases
	sem   *semProto   // the protocol of Semaphore; nil under Redlock
	rw    *rwProto    // the protocol of RWLock; nil under Redlock
	multi *multiProto // the protocol of AcquireAll's leases; nil under Redlock
}

// NewWithClient is New on any Client: the go-redis adapter (Sentinel,
// Cluster), or a wrapper that injects faults in tests. Before its first
// obtain the registry reads INFO memory once, if the client has an Info
// method, and logs a warning if maxmemory-policy can evict lock keys.
func NewWithClient(client Client, registryKey string, opts ...Option) (*Registry, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	return build(registryKey, opts, func(cfg config, st *core.Counters) core.Executor {
		return core.NewClientExec(client, cfg.commandTimeout, st)
	})
}

// build checks the registry key and the options, and assembles a registry
// on the executor that newExec makes.
func build(registryKey string, opts []Option, newExec func(config, *core.Counters) core.Executor) (*Registry, error) {
	if err := checkRegistryKey(registryKey); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	r := &Registry{engine: engine{
		core: core.Core{
			Log:      cfg.logger.With("registry", registryKey),
			Epoch:    time.Now(),
			ClientID: uuid.NewString(),
			BG:       core.NewGroup(),
			Counters: core.NewCounters(),
		},
		layout: wire.Layout{Registry: registryKey, HashTag: cfg.hashTag},
		cfg:    cfg,
	}}
	r.core.Exec = newExec(cfg, r.core.Counters)
	r.obs = observing{c: &r.core, o: cfg.observer}
	r.labels = labeller{c: &r.core, key: r.layout.LabelKey(r.core.ClientID), label: cfg.label}
	r.mutex = newMutexProto(r.core.Exec, newScripts(r.layout, cfg), cfg, r.core.Counters, r.core.Log)
	if one, ok := r.core.Exec.(*core.ClientExec); ok {
		r.sem = &semProto{one: one, s: newScripts(r.layout, cfg), scriptsOnly: cfg.scriptsOnly}
		r.rw = &rwProto{one: one, s: newScripts(r.layout, cfg)}
		r.multi = &multiProto{one: one, s: newScripts(r.layout, cfg)}
	}
	r.cache.capacity = cfg.capacity
	r.core.Watchdog = core.NewWatchdog(&r.core, cfg.autoRenew)
	if cfg.observer != nil {
		r.core.OnRenewalFailed, r.core.OnLost = r.obs.renewalFailed, r.obs.lost
	}
	r.core.ServerLost = r.labels.lost
	r.subscriber = newReleaseSubscriber(&r.core, &r.cache, &r.watch, r.layout, &r.cfg)
	r.turns = newTurnSubscriber(&r.core, &r.cache, r.layout, &r.cfg, r.granted)
	return r, nil
}

// isNil reports whether v is nil or an interface holding a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.Slice:
		return rv.IsNil()
	}
	return false
}

// ExpireUnusedOlderThan removes from the cache every lock that nobody holds
// or waits for and that was last obtained, locked or unlocked at least age
// ago; a negative age removes every such lock. It never touches Redis.
func (r *Registry) ExpireUnusedOlderThan(age time.Duration) {
	r.cache.expire(r.core.Now(), age)
}

// Stats returns a snapshot of the registry's counters. It is cheap and safe
// to call concurrently; the counters are read one by one, not atomically
// together.
func (r *Registry) Stats() Stats { return snapshot(r.core.Counters, r.cache.len()) }

// AutoRenew reports whether the registry was made WithAutoRenew: its
// watchdog renews every hold, of a lock or a lease, until it is released.
func (r *Registry) AutoRenew() bool { return r.cfg.autoRenew }

// Done returns a channel that is closed when Close is called, for code
// that works on a registry's locks and leases (renewing them itself, say)
// and must stop with it.
func (r *Registry) Done() <-chan struct{} { return r.core.BG.Closed }

// Close stops the registry's background goroutines, waits for them, and
// makes every waiter return ErrClosed. Afterwards Obtain, LockContext and
// ExecuteLocked return ErrClosed, TryLock returns false and Lock panics;
// held locks can still be released. Keys held in Redis are not deleted.
// With WithAutoRenew, the holds that the watchdog renewed are renewed no
// more: their Lost channels close at once, and the context of an
// ExecuteLocked fn ends with a cause that matches ErrClosed and
// ErrLockLost, rather than a TTL later when the hold is lost. Close is
// idempotent and always returns nil.
func (r *Registry) Close() error {
	r.core.BG.Close()
	r.core.Watchdog.OrphanAll()
	return nil
}
