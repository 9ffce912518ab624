package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/google/uuid"
)

// Pool hands out Redis connections. *redis.Pool (redigo) satisfies it. The
// connections must implement redis.ConnWithContext, as redigo's do; those
// that also implement redis.ConnWithTimeout (redigo's do) run each command
// in the calling goroutine, which is faster.
type Pool interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// Registry hands out one *RedisLock per key under a key prefix, the
// registryKey. It is safe for concurrent use. Create it with New and Close it
// when done; Close stops its background goroutines but deletes no key.
type Registry struct {
	client   Client
	prefix   string        // registryKey
	clientID string        // random UUID, the first part of every token of this registry
	seq      atomic.Uint64 // acquisitions, the second part of every token
	// Script arguments that never change, converted to interfaces once.
	ttlArg, markerTTLArg, clientIDArg any
	cfg                               config
	log                               *slog.Logger
	epoch                             time.Time // origin of now, read on the monotonic clock

	locks sync.Map     // key string -> *RedisLock
	size  atomic.Int64 // entries in locks
	// insertMu serialises cache insertions and evictions so that the size
	// bound holds; cache hits do not take it.
	insertMu sync.Mutex

	// bgCtx bounds the Redis calls of background goroutines; Close cancels it.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	// heldMu guards held: the holds the watchdog renews (WithAutoRenew).
	heldMu sync.Mutex
	held   map[*RedisLock]*hold

	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	// goMu guards wg.Add against Close's wg.Wait: no goroutine starts once
	// closed is closed.
	goMu sync.Mutex
	wg   sync.WaitGroup
	// renewStarted and subStarted record that the watchdog and the
	// subscriber were started; set under goMu, read without it.
	renewStarted, subStarted atomic.Bool
	evictionChecked          atomic.Bool // see checkEviction

	stats *stats
}

// New returns a registry of locks whose Redis keys are registryKey + ":" +
// key, on the Redis that pool connects to: New(pool, ...) is
// NewWithClient(NewPoolClient(pool), ...). It does not contact Redis. It
// fails with ErrInvalidConfig for a nil pool or an option out of range, and
// with ErrInvalidKey for an empty or over-long registryKey or one that
// begins with '{'.
func New(pool Pool, registryKey string, opts ...Option) (*Registry, error) {
	if isNil(pool) {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	return NewWithClient(NewPoolClient(pool), registryKey, opts...)
}

// NewWithClient is New on any Client: the go-redis adapter (Sentinel,
// Cluster), or a wrapper that injects faults in tests. Before its first
// obtain the registry reads INFO memory once, if the client has an Info
// method, and logs a warning if maxmemory-policy can evict lock keys.
func NewWithClient(client Client, registryKey string, opts ...Option) (*Registry, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if err := checkRegistryKey(registryKey); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	clientID := uuid.NewString()
	return &Registry{
		ttlArg: cfg.expireAfter.Milliseconds(),
		// A wait marker lives twice the longest sleep between two attempts
		// of a waiter, so that it lasts while the waiter waits.
		markerTTLArg: max(1, 2*cfg.idle.Milliseconds()),
		clientIDArg:  clientID,
		client:       client,
		bgCtx:        bgCtx,
		bgCancel:     bgCancel,
		held:         make(map[*RedisLock]*hold),
		prefix:       registryKey,
		clientID:     clientID,
		cfg:          cfg,
		log:          cfg.logger.With("registry", registryKey),
		epoch:        time.Now(),
		closed:       make(chan struct{}),
		stats:        newStats(),
	}, nil
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

// now returns the registry clock: nanoseconds since New, on the monotonic clock.
func (r *Registry) now() int64 { return int64(time.Since(r.epoch)) }

func (r *Registry) isClosed() bool {
	select {
	case <-r.closed:
		return true
	default:
		return false
	}
}

// Obtain returns the lock for key, the same *RedisLock for the same key while
// it stays cached. It does not contact Redis. It fails with ErrInvalidKey,
// ErrClosed, or ErrCacheFull when a new key does not fit because every
// cached lock is held or waited for.
func (r *Registry) Obtain(key string) (*RedisLock, error) {
	if r.isClosed() {
		return nil, ErrClosed
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := r.checkHashTag(key); err != nil {
		return nil, err
	}
	if v, ok := r.locks.Load(key); ok {
		l := v.(*RedisLock)
		l.touch()
		return l, nil
	}
	return r.insert(key)
}

// RenewLock resets the time to live of the lock on key that this registry
// holds, whichever goroutine holds it. It returns ErrNotOwner if the registry
// holds no lock on key, and ErrLockLost (marking the hold lost) if the Redis
// key is gone or carries another token.
func (r *Registry) RenewLock(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	v, ok := r.locks.Load(key)
	if !ok {
		return fmt.Errorf("%w: %q is not held by this registry", ErrNotOwner, key)
	}
	return v.(*RedisLock).renew(ctx)
}

// ExecuteLocked runs fn while holding the lock on key, waiting for it as
// LockContext does. fn's context is cancelled, with cause ErrLockLost, when
// the lock is lost: its validity ends at the obtain's send time plus
// expireAfter (minus a drift margin) unless renewed. The lock is released
// when fn returns or panics. The result joins fn's error with the release's:
// after a loss it matches ErrLockLost and is never nil.
func (r *Registry) ExecuteLocked(ctx context.Context, key string, fn func(ctx context.Context) error) (err error) {
	l, err := r.Obtain(key)
	if err != nil {
		return err
	}
	if err := l.LockContext(ctx); err != nil {
		return err
	}
	h := l.hold.Load()
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(h.watch(r), func() { cancel(ErrLockLost) })
	defer func() {
		stop()
		cancel(nil)
		lost := h.lost(r.now())
		uerr := l.UnlockContext(ctx)
		if lost {
			r.stats.lostHold(h)
		}
		if lost && !errors.Is(uerr, ErrLockLost) {
			uerr = errors.Join(uerr, fmt.Errorf("%w: validity of %q ended before release", ErrLockLost, key))
		}
		err = errors.Join(err, uerr)
	}()
	return fn(fctx)
}

// Close stops the registry's background goroutines, waits for them, and
// makes every waiter return ErrClosed. Afterwards Obtain, LockContext and
// ExecuteLocked return ErrClosed, TryLock returns false and Lock panics;
// held locks can still be released. Keys held in Redis are not deleted.
// Close is idempotent and always returns nil.
func (r *Registry) Close() error {
	r.goMu.Lock()
	r.closeOnce.Do(func() {
		close(r.closed)
		r.bgCancel()
	})
	r.goMu.Unlock()
	r.wg.Wait()
	return nil
}

// spawn runs fn in a goroutine that Close waits for, unless the registry is
// closed; it reports whether fn was started.
func (r *Registry) spawn(fn func()) bool {
	r.goMu.Lock()
	defer r.goMu.Unlock()
	if r.isClosed() {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn()
	}()
	return true
}

// startOnce starts fn with spawn the first time it is called for started.
// Later calls cost one atomic load: it is on the path of every acquisition.
func (r *Registry) startOnce(started *atomic.Bool, fn func()) {
	if started.Load() {
		return
	}
	r.goMu.Lock()
	if started.Load() || r.isClosed() {
		r.goMu.Unlock()
		return
	}
	started.Store(true)
	r.goMu.Unlock()
	r.spawn(fn)
}

// eval runs one script, bounded by the command timeout and ctx's deadline.
func (r *Registry) eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	ctx, cancel := r.bound(ctx)
	defer cancel()
	v, err := r.client.Eval(ctx, s, keys, args)
	r.stats.redisError(err)
	return v, err
}

// bound returns ctx with a deadline at most the command timeout away. A
// nearer deadline of ctx is kept as it is, without a timer.
func (r *Registry) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= r.cfg.commandTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.cfg.commandTimeout)
}

// checkEviction warns, once per registry, before its first obtain, when
// the server's maxmemory-policy may evict lock keys: every policy but
// noeviction can, since lock keys carry a TTL and so are volatile too. An
// evicted key is a lost lock that the holder learns of only at its next
// renewal. Errors (INFO renamed or denied, a server that is down) are
// logged at debug level and not retried.
func (r *Registry) checkEviction(ctx context.Context) {
	if r.evictionChecked.Load() || !r.evictionChecked.CompareAndSwap(false, true) {
		return
	}
	ic, ok := r.client.(infoClient)
	if !ok {
		return
	}
	ctx, cancel := r.bound(ctx)
	defer cancel()
	info, err := ic.Info(ctx, "memory")
	if err != nil {
		r.log.Debug("lockyard: eviction policy check skipped", "err", err)
		return
	}
	if policy := infoField(info, "maxmemory_policy"); policy != "" && policy != "noeviction" {
		r.log.Warn("lockyard: the Redis maxmemory-policy can evict lock keys, and an evicted key is a lost lock; use noeviction",
			"maxmemory_policy", policy, "maxmemory", infoField(info, "maxmemory"))
	}
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
