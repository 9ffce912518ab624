package registry

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
)

// LockType selects how a waiter learns that a lock was released.
type LockType int

const (
	// SpinLock waiters poll Redis every idleBetweenTries, or sooner when the
	// holder's key expires sooner. Default.
	SpinLock LockType = iota
	// PubSubLock waiters are woken by the message that every release of a
	// lock publishes (a semaphore's waiters: by the message that tells their
	// registry its turn), and poll only as a fallback.
	PubSubLock
)

// String returns the name of t.
func (t LockType) String() string {
	switch t {
	case SpinLock:
		return "SpinLock"
	case PubSubLock:
		return "PubSubLock"
	}
	return fmt.Sprintf("LockType(%d)", int(t))
}

// Defaults and limits of the options.
const (
	DefaultExpireAfter      = 60 * time.Second
	DefaultIdleBetweenTries = 100 * time.Millisecond
	DefaultCacheCapacity    = 100_000
	DefaultCommandTimeout   = 5 * time.Second
	// MaxDuration bounds every duration option (one year).
	MaxDuration = 365 * 24 * time.Hour
	// MinExpireAfter is the shortest time to live a lock may have. A hold
	// is valid for its TTL minus a drift margin (1% + 2ms, at most a tenth)
	// from the moment the obtain was sent, so a shorter TTL would be used up
	// by a round trip, a scheduling delay or a GC pause, and every hold
	// would be lost as soon as it began.
	MinExpireAfter = 50 * time.Millisecond
)

// Option configures a Registry in New.
type Option func(*config) error

// config is the unexported configuration an Option edits.
type config struct {
	expireAfter    time.Duration
	idle           time.Duration
	lockType       LockType
	capacity       int
	autoRenew      bool
	fencing        bool
	logger         *slog.Logger
	commandTimeout time.Duration
	hashTag        bool
	scriptsOnly    bool // WithScriptsOnly
	ackReplicas    int
	ackTimeout     time.Duration
	label          string    // WithLabel; defaultLabel() when empty
	observer       *Observer // WithObserver; nil: none
	// Turns and runs of local holds (the defaults below); tests change
	// them.
	turnWindow, pollAhead, pollSlack, freePassSpan, chainSpan time.Duration
	refusedRetry                                              time.Duration // how soon a refused turn subscriber asks again
	crowdMemory                                               time.Duration // how long an instance expects waiters after a release found some
}

// Turns (lua/prelude.lua): when a lock key is freed while waiters of other
// lock instances are queued, the script that frees it (release, a pass, or
// an obtain that finds it free after it expired) keeps it, for a short
// window, for the first of them that is sure to try soon, and publishes
// the release message. The defaults below are what the bench's fairness
// scenarios were measured with (docs/ARCHITECTURE.md).
const (
	// turnWindow is a waiter's turn when it is woken by the release
	// message (PubSubLock): long enough for the message to reach it and
	// its obtain to come back, with room for a scheduling delay. A turn
	// that is not taken in time lapses: the key then goes to whoever
	// tries first.
	turnWindow = 5 * time.Millisecond
	// pollAhead: a waiter that polls (SpinLock) gets a turn only if its
	// next try is due within pollAhead, and within a third of its poll
	// interval or pollSlack plus a ms, whichever is longer (prelude.lua,
	// soon); the key is then kept for it until then, plus pollSlack. A
	// poller due later is passed over, and keeps its place: the key would
	// idle until it tries.
	pollAhead = 20 * time.Millisecond
	pollSlack = 2 * time.Millisecond
)

// crowdMemory is how long after a release found waiters queued a lock or
// semaphore instance still expects them (core.Crowd; config.crowdMemory,
// tests change it): its releases are the scripts that give the turn in the
// same round trip (release.lua, semrelease.lua), where a quiet release (the
// native delete, drop.lua, a plain ZREM) that finds waiters all the same
// takes a second one.
const crowdMemory = time.Second

// refusedRetry is how long a subscriber that the server refused (NOPERM)
// waits before it asks again (subscriber.go): an ACL is fixed by hand, if
// at all.
const refusedRetry = time.Minute

// Runs of local holds (handoff.go): free passes go on for freePassSpan
// after the last command on the key (twice that on a permit of a semaphore
// of several permits: engine.freeSpan); chainSpan bounds a run, so the share
// of time a busy instance leaves its key free for others is about
// grace/chainSpan.
const (
	freePassSpan = 5 * time.Millisecond
	chainSpan    = 24 * time.Millisecond
)

// newConfig applies opts to the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for i, opt := range opts {
		if opt == nil {
			return cfg, fmt.Errorf("%w: option %d is nil", ErrInvalidConfig, i)
		}
		if err := opt(&cfg); err != nil {
			return cfg, err
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.ackReplicas > 0 && (cfg.ackTimeout >= cfg.commandTimeout || cfg.ackTimeout >= cfg.expireAfter) {
		return cfg, fmt.Errorf("%w: replica ack timeout %v must be shorter than the command timeout (%v) and expireAfter (%v)",
			ErrInvalidConfig, cfg.ackTimeout, cfg.commandTimeout, cfg.expireAfter)
	}
	return cfg, nil
}

func defaultConfig() config {
	return config{
		expireAfter:    DefaultExpireAfter,
		idle:           DefaultIdleBetweenTries,
		lockType:       SpinLock,
		capacity:       DefaultCacheCapacity,
		commandTimeout: DefaultCommandTimeout,
		turnWindow:     turnWindow,
		pollAhead:      pollAhead,
		pollSlack:      pollSlack,
		freePassSpan:   freePassSpan,
		chainSpan:      chainSpan,
		refusedRetry:   refusedRetry,
		crowdMemory:    crowdMemory,
		label:          defaultLabel(),
	}
}

func checkDuration(name string, d, min time.Duration) error {
	if d < min || d > MaxDuration {
		return fmt.Errorf("%w: %s %v out of range [%v, %v]", ErrInvalidConfig, name, d, min, MaxDuration)
	}
	return nil
}

// WithExpireAfter sets the lock's time to live in Redis (default 60s,
// millisecond precision). A holder keeps the lock for this long unless it
// renews it. d below MinExpireAfter (50ms) or above MaxDuration makes New
// fail with ErrInvalidConfig.
func WithExpireAfter(d time.Duration) Option {
	return func(c *config) error {
		c.expireAfter = d
		return checkDuration("expireAfter", d, MinExpireAfter)
	}
}

// WithIdleBetweenTries sets how long a waiter sleeps between attempts
// (default 100ms; a PubSubLock waiter is woken earlier by releases); it
// sleeps less when the holder's key expires sooner. A waiter's entry in the
// key's wait queue lapses d after the next try it announced. d <= 0 or
// above MaxDuration makes New fail.
func WithIdleBetweenTries(d time.Duration) Option {
	return func(c *config) error {
		c.idle = d
		return checkDuration("idleBetweenTries", d, 1)
	}
}

// WithLockType selects SpinLock (default) or PubSubLock.
func WithLockType(t LockType) Option {
	return func(c *config) error {
		if t != SpinLock && t != PubSubLock {
			return fmt.Errorf("%w: unknown lock type %v", ErrInvalidConfig, t)
		}
		c.lockType = t
		return nil
	}
}

// WithCacheCapacity bounds the number of cached locks (default 100 000).
// When full, Obtain of a new key evicts the least recently used unheld locks.
// n <= 0 makes New fail.
func WithCacheCapacity(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: cache capacity %d must be positive", ErrInvalidConfig, n)
		}
		c.capacity = n
		return nil
	}
}

// WithAutoRenew makes the registry renew every lock it holds every third of
// its TTL (expireAfter, or the ttl of LockFor or RenewLockFor) until it is
// released.
func WithAutoRenew() Option {
	return func(c *config) error {
		c.autoRenew = true
		return nil
	}
}

// WithFencing makes every acquisition take a fencing token, strictly
// increasing per key across all holders, also after Redis lost the counter;
// see RedisLock.Token. The scripts then call TIME (an ACL needs +time). A local
// hand-off then costs one round trip (the pass script takes the next
// token) instead of none.
func WithFencing() Option {
	return func(c *config) error {
		c.fencing = true
		return nil
	}
}

// WithLogger sets the logger for lost locks and Redis errors that cannot be
// returned (Lock, Unlock). Default slog.Default(). A nil logger makes New fail.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
		}
		c.logger = l
		return nil
	}
}

// WithCommandTimeout bounds each Redis call (default 5s). Calls made for a
// context-taking method end sooner if their context does; Lock, TryLock and
// Unlock rely on this bound alone against a server that never answers.
func WithCommandTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.commandTimeout = d
		return checkDuration("commandTimeout", d, time.Millisecond)
	}
}

// WithHashTag makes lock keys registryKey:{key}, with the fence counter at
// registryKey:{key}:fence and the wait queue at registryKey:{key}:queue
// (and :polls, :waiters, :turn), so that in Redis Cluster the lock's slot
// is the slot of the hash tag {key}, whatever braces key contains. The
// default, registryKey:key, is Spring RedisLockRegistry's key; its fence
// counter and wait queue lie in its slot too ({registryKey:key}:fence, or,
// for a key with a hash tag of its own, {TAG}registryKey:key:fence). Every
// registry and process on one registryKey must use the same form: the two
// forms are different keys, and would not exclude each other. With
// WithHashTag, Obtain rejects (ErrInvalidKey) a key whose hash tag would be
// empty, such as one that begins with '}'.
func WithHashTag() Option {
	return func(c *config) error {
		c.hashTag = true
		return nil
	}
}

// WithReplicaAck makes each obtain wait, on the same connection, until n
// replicas acknowledged it (WAIT n timeout). If fewer did within timeout,
// the lock is released again and the attempt fails with ErrReplicaAck;
// LockContext and Lock retry it. Renewals wait the same way, and one that
// too few replicas acknowledged does not extend the hold's validity
// (RenewLock returns ErrReplicaAck; the watchdog tries again a period
// later): a hold that no acknowledged renewal extends in time is lost.
//
// This narrows the failover hole of a single master: a replica promoted
// after the ack has the key. It does not close it (WAIT does not make
// Redis strongly consistent; see docs/SCALING.md), and it costs the
// replication round trip on every obtain and renewal (and Redis checks
// WAIT timeouts on its clock tick, so with the default hz 10 a refusal can
// take up to 100ms more than timeout).
//
// New fails if n < 1, timeout <= 0, or timeout is not shorter than both
// the command timeout and expireAfter.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) error {
		if n < 1 || timeout <= 0 {
			return fmt.Errorf("%w: replica ack needs n >= 1 and timeout > 0, got %d and %v", ErrInvalidConfig, n, timeout)
		}
		c.ackReplicas, c.ackTimeout = n, timeout
		return nil
	}
}

// WithScriptsOnly makes the registry renew and release its locks by Lua
// script even on a server that has the native compare-and-set and
// compare-and-delete (SET IFEQ on Redis 8.4+ and Valkey 8.1+; DELEX on
// Redis 8.4+ and Valkey 9.2+; DELIFEQ on Valkey 9.0+), which it uses by
// default on one Client (see the README's wire-format section). The two
// are interchangeable on the wire: registries of either kind share keys.
// It is for comparing the two, and for a proxy that would route COMMAND
// elsewhere than the commands it describes.
func WithScriptsOnly() Option {
	return func(c *config) error {
		c.scriptsOnly = true
		return nil
	}
}

// Observer is told what a registry's acquisitions do, for tracing and
// metrics beyond Stats (the module github.com/lockyard/lockyard/otel is
// one). Waiting, Acquired and Released run on the goroutine where the
// event happened, with no lock of the registry held; Lost, RenewalFailed
// and the Released of a revoked hold are found with a hold's locks held,
// and run on a goroutine of the registry instead (none after Close), which
// Close waits for: such a function must not call Close. The functions
// must not block: record what is needed and return. A nil
// function is skipped, and a registry without an Observer builds no
// Event. An Event's Token names the hold in Redis, which a local hand-off
// passes to the next goroutine: the Lost of a hold may follow the Released
// of the acquisition that handed it on.
type Observer struct {
	// Waiting: a Lock, LockContext, Acquire or Semaphore.Acquire begins
	// (it may get the lock at once, re-enter it, or fail: a wait that
	// fails has no event of its own; Stats counts it).
	Waiting func(Event)
	// Acquired: an outermost acquisition, with how long it waited (Wait;
	// 0 for TryLock and TryAcquire).
	Acquired func(Event)
	// Released: the end of an outermost acquisition (an Unlock, a
	// Release, a hand-over to the next goroutine, or a revocation), with
	// how long it was held (Held).
	Released func(Event)
	// Lost: a hold lost before its release (its validity ended, or a
	// renewal or the release found its key gone), once per hold, as
	// Stats.LostLocks counts it.
	Lost func(Event)
	// RenewalFailed: a renewal failed with Err; the hold stays valid until
	// its deadline.
	RenewalFailed func(Event)
}

// Event is what an Observer is told.
type Event struct {
	Key   string        // the Redis key
	Kind  string        // "lock" (a RedisLock or its Lease), "semaphore", "rwlock" or "multi" (AcquireAll; Key is its first key)
	Token string        // the value in Redis ("" while waiting)
	Fence int64         // the fencing token (0 without WithFencing)
	Wait  time.Duration // Acquired: how long it waited
	Held  time.Duration // Released: how long it was held
	Err   error         // RenewalFailed: why
}

// JoinObservers returns an Observer that tells each of obs, in order, of
// every event: the OpenTelemetry observer and one of the caller's, say. A
// nil field of any of them is skipped (a registry skips the nil fields of
// its Observer too), so an Observer may set only the events it wants.
func JoinObservers(obs ...Observer) Observer {
	join := func(field func(Observer) func(Event)) func(Event) {
		var fs []func(Event)
		for _, o := range obs {
			if f := field(o); f != nil {
				fs = append(fs, f)
			}
		}
		switch len(fs) {
		case 0:
			return nil
		case 1:
			return fs[0]
		}
		return func(e Event) {
			for _, f := range fs {
				f(e)
			}
		}
	}
	return Observer{
		Waiting:       join(func(o Observer) func(Event) { return o.Waiting }),
		Acquired:      join(func(o Observer) func(Event) { return o.Acquired }),
		Released:      join(func(o Observer) func(Event) { return o.Released }),
		Lost:          join(func(o Observer) func(Event) { return o.Lost }),
		RenewalFailed: join(func(o Observer) func(Event) { return o.RenewalFailed }),
	}
}

// WithObserver makes o told of every acquisition's events (see Observer).
func WithObserver(o Observer) Option {
	return func(c *config) error {
		c.observer = &o
		return nil
	}
}

// MaxLabelLen bounds the length of a label (WithLabel), in bytes.
const MaxLabelLen = 256

// WithLabel sets the label that Inspect and `lockyard status` show for this registry's holds and waits
// (default: host name and process id). It is written once per registry, not per acquisition, and expires with it.
//
// The label is published just before the registry's first attempt in
// Redis (one more command, which that attempt waits for at most 200ms, and
// only if its context has a second or more left), then renewed every few
// minutes by a goroutine that Close stops; it expires ten minutes after
// the last renewal. A publication that fails is tried again after 1s,
// 2s, 4s and so on, up to the renewal period. It must be
// valid UTF-8, 1 to MaxLabelLen bytes; another value makes New fail with
// ErrInvalidConfig. An ACL that refuses the label key (see
// docs/SECURITY.md) only leaves the label out.
func WithLabel(label string) Option {
	return func(c *config) error {
		if label == "" || len(label) > MaxLabelLen || !utf8.ValidString(label) {
			return fmt.Errorf("%w: label must be valid UTF-8 of 1 to %d bytes, got %q", ErrInvalidConfig, MaxLabelLen, label)
		}
		c.label = label
		return nil
	}
}

// defaultLabel is "HOST/PID" (or "PID" when the host name is unknown).
func defaultLabel() string {
	pid := strconv.Itoa(os.Getpid())
	if host, err := os.Hostname(); err == nil && host != "" {
		return host + "/" + pid
	}
	return pid
}
