package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredigo "github.com/go-redsync/redsync/v4/redis/redigo"
	rsrueidis "github.com/go-redsync/redsync/v4/redis/rueidis"
	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"

	lygoredis "github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/registry"
	lyrueidis "github.com/lockyard/lockyard/rueidis"
)

// ttl is the lock time to live in every scenario, as in the figures.
const ttl = 8 * time.Second

// tunedRetry is the fair retry delay given to the peers' tuned variants.
const tunedRetry = 2 * time.Millisecond

// impl is one library in one configuration. open makes the client of one
// process, counting its traffic to the lock server with ctr.
type impl struct {
	name  string
	peer  bool
	floor bool   // the raw client: a reference row, neither peer nor lockyard
	part  bool   // a raw client with one of lockyard's costs: a reference row
	sets  string // the scenarios it runs in; "" for 1, 2, 3 and 4
	open  func(addr string, ctr *counter) (client, error)
}

// in reports whether im runs in scenario sc.
func (im impl) in(sc string) bool {
	if im.sets == "" {
		return strings.Contains("1234", sc)
	}
	return strings.Contains(im.sets, sc)
}

func isPeer(im impl) bool { return im.peer }

// client is one process's handle on a library.
type client interface {
	// locker returns what one goroutine uses to lock key.
	locker(key string) (locker, error)
	close()
}

type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// renewer is a locker that can extend the hold it has (scenario r).
type renewer interface {
	renew(ctx context.Context) error
}

// scriptsImpl is lockyard renewing and releasing by script
// (WithScriptsOnly): what the native commands are measured against.
const scriptsImpl = "lockyard spin, scripts"

var impls = []impl{
	{name: "raw redigo (floor)", floor: true, sets: "u", open: openRaw(nil, rawUnlock)},
	{name: "part: floor + PUBLISH in the release", part: true, sets: "u", open: openRaw(nil, rawUnlockPublish)},
	{name: "part: + obtain script (lockyard before)", part: true, sets: "u", open: openRaw(rawObtain, rawUnlockPublish)},
	{name: "lockyard spin", sets: "1234ur", open: openLockyard(registry.SpinLock)},
	{name: scriptsImpl, sets: "ur", open: openLockyard(registry.SpinLock, registry.WithScriptsOnly())},
	{name: "lockyard pubsub", sets: "1234u", open: openLockyard(registry.PubSubLock)},
	{name: "lockyard spin, go-redis", sets: "4u", open: openLockyardGoRedis(registry.SpinLock)},
	{name: "lockyard spin, rueidis", sets: "4u", open: openLockyardRueidis(registry.SpinLock, 0)},
	{name: "lockyard spin, rueidis+flush", sets: "4", open: openLockyardRueidis(registry.SpinLock, flushDelay)},
	{name: "lockyard spin, rueidis+flush, scripts", sets: "4", open: openLockyardRueidis(registry.SpinLock, flushDelay, registry.WithScriptsOnly())},
	{name: "redsync default", peer: true, open: openRedsync()},
	{name: "redsync tuned", peer: true, sets: "1234ur", open: openRedsync(redsync.WithRetryDelay(tunedRetry), redsync.WithTries(1<<30))},
	{name: "redsync tuned, rueidis", peer: true, sets: "4u", open: openRedsyncRueidis(0, redsync.WithRetryDelay(tunedRetry), redsync.WithTries(1<<30))},
	{name: "redsync tuned, rueidis+flush", peer: true, sets: "4", open: openRedsyncRueidis(flushDelay, redsync.WithRetryDelay(tunedRetry), redsync.WithTries(1<<30))},
	{name: "redislock naive", peer: true, open: openRedislock(nil)},
	{name: "redislock tuned", peer: true, sets: "1234u", open: openRedislock(&redislock.Options{RetryStrategy: redislock.LinearBackoff(tunedRetry)})},
}

func implByName(name string) (impl, bool) {
	for _, im := range impls {
		if im.name == name {
			return im, true
		}
	}
	return impl{}, false
}

// redigoPool dials addr through a counting connection.
func redigoPool(addr string, ctr *counter) *redigo.Pool {
	return &redigo.Pool{
		MaxIdle:     64,
		IdleTimeout: time.Minute,
		Dial: func() (redigo.Conn, error) {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return redigo.NewConn(wrap(nc, ctr), 10*time.Second, 10*time.Second), nil
		},
	}
}

// raw redigo, the floor: SET NX PX, then a compare-and-delete script, on a
// pool connection each; a counter for tokens, no options, no local state,
// and no context (redigo's DoContext costs a goroutine per command). The
// "part" rows add one of lockyard's costs at a time: the PUBLISH of its
// release (release.lua), and an obtain script of obtain.lua's shape (two
// keys, four arguments) instead of the plain SET.

var (
	rawUnlock        = redigo.NewScript(1, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	rawUnlockPublish = redigo.NewScript(1, `if redis.pcall('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], KEYS[1]) return 1 end return 0`)
	rawObtain        = redigo.NewScript(2, `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end return {0, redis.call('PTTL', KEYS[1])}`)
)

type rawClient struct {
	pool            *redigo.Pool
	n               atomic.Int64
	obtain, release *redigo.Script // obtain nil: a plain SET NX PX
}

func openRaw(obtain, release *redigo.Script) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		return &rawClient{pool: redigoPool(addr, ctr), obtain: obtain, release: release}, nil
	}
}

func (c *rawClient) locker(key string) (locker, error) {
	return &rawLocker{c: c, key: key}, nil
}

func (c *rawClient) close() { _ = c.pool.Close() }

type rawLocker struct {
	c     *rawClient
	key   string
	token string
}

func (l *rawLocker) lock(ctx context.Context) error {
	l.token = strconv.FormatInt(l.c.n.Add(1), 10)
	for {
		conn, err := l.c.pool.GetContext(ctx)
		if err != nil {
			return err
		}
		var ok bool
		if l.c.obtain == nil {
			var reply string
			reply, err = redigo.String(conn.Do("SET", l.key, l.token, "NX", "PX", ttl.Milliseconds()))
			ok = err == nil && reply == "OK"
		} else {
			var reply []int64
			reply, err = redigo.Int64s(l.c.obtain.Do(conn, l.key, "{"+l.key+"}:wait", l.token, ttl.Milliseconds(), 200, "raw"))
			ok = err == nil && len(reply) == 2 && reply[0] == 1
		}
		conn.Close()
		switch {
		case ok:
			return nil
		case err != nil && err != redigo.ErrNil:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tunedRetry):
		}
	}
}

func (l *rawLocker) unlock(ctx context.Context) error {
	conn, err := l.c.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if l.c.release == rawUnlock {
		_, err = rawUnlock.Do(conn, l.key, l.token)
		return err
	}
	_, err = l.c.release.Do(conn, l.key, l.token, "raw-channel:"+l.key)
	return err
}

// lockyard: one registry per process; goroutines share its *RedisLock.

type lyClient struct {
	reg    *registry.Registry
	closer io.Closer // the client's connections
}

func openLockyard(lt registry.LockType, extra ...registry.Option) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		pool := redigoPool(addr, ctr)
		opts := append([]registry.Option{registry.WithExpireAfter(ttl), registry.WithLockType(lt)}, extra...)
		reg, err := registry.New(pool, "bench", opts...)
		if err != nil {
			return nil, err
		}
		return &lyClient{reg: reg, closer: pool}, nil
	}
}

// openLockyardGoRedis is openLockyard on the go-redis adapter.
func openLockyardGoRedis(lt registry.LockType) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		rdb := goredisClient(addr, ctr)
		reg, err := registry.NewWithClient(lygoredis.NewClient(rdb), "bench", registry.WithExpireAfter(ttl), registry.WithLockType(lt))
		if err != nil {
			return nil, err
		}
		return &lyClient{reg: reg, closer: rdb}, nil
	}
}

func (c *lyClient) locker(key string) (locker, error) {
	l, err := c.reg.Obtain(key)
	return lyLocker{l: l, reg: c.reg, key: key}, err
}

func (c *lyClient) close() {
	_ = c.reg.Close()
	_ = c.closer.Close()
}

type lyLocker struct {
	l   *registry.RedisLock
	reg *registry.Registry
	key string
}

func (l lyLocker) lock(ctx context.Context) error   { return l.l.LockContext(ctx) }
func (l lyLocker) unlock(ctx context.Context) error { return l.l.UnlockContext(ctx) }
func (l lyLocker) renew(ctx context.Context) error  { return l.reg.RenewLock(ctx, l.key) }

// flushDelay is the MaxFlushDelay of the "+flush" rueidis contenders: the
// value rueidis's documentation suggests for throughput under load (each
// flush waits up to that long for more commands; less CPU in system calls
// on both sides, a little more latency).
const flushDelay = 20 * time.Microsecond

// rueidisClient dials addr through a counting connection. Its commands of
// concurrent goroutines share a few auto-pipelined connections, flushed
// after waiting up to flush for more.
func rueidisClient(addr string, ctr *counter, flush time.Duration) (rueidis.Client, error) {
	return rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,                         // no Cluster probe
		DisableCache:      true,                         // no CLIENT TRACKING per connection
		ClientSetInfo:     rueidis.DisableClientSetInfo, // no CLIENT SETINFO per connection
		MaxFlushDelay:     flush,
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return wrap(nc, ctr), nil
		},
	})
}

// closeFunc adapts rueidis.Client.Close to io.Closer.
type closeFunc func()

func (f closeFunc) Close() error { f(); return nil }

// openLockyardRueidis is openLockyard on the rueidis adapter.
func openLockyardRueidis(lt registry.LockType, flush time.Duration, extra ...registry.Option) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		rc, err := rueidisClient(addr, ctr, flush)
		if err != nil {
			return nil, err
		}
		opts := append([]registry.Option{registry.WithExpireAfter(ttl), registry.WithLockType(lt)}, extra...)
		reg, err := registry.NewWithClient(lyrueidis.NewClient(rc), "bench", opts...)
		if err != nil {
			rc.Close()
			return nil, err
		}
		return &lyClient{reg: reg, closer: closeFunc(rc.Close)}, nil
	}
}

// redsync: one Mutex per goroutine (a Mutex remembers its value); Lock is
// called again when it gives up after its tries.

type rsClient struct {
	rs     *redsync.Redsync
	closer io.Closer // the client's connections
	opts   []redsync.Option
}

func openRedsync(opts ...redsync.Option) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		pool := redigoPool(addr, ctr)
		return &rsClient{rs: redsync.New(rsredigo.NewPool(pool)), closer: pool, opts: opts}, nil
	}
}

func (c *rsClient) locker(key string) (locker, error) {
	return rsLocker{c.rs.NewMutex(key, append([]redsync.Option{redsync.WithExpiry(ttl)}, c.opts...)...)}, nil
}

func (c *rsClient) close() { _ = c.closer.Close() }

// openRedsyncRueidis is redsync on its rueidis adapter (through
// rueidiscompat).
func openRedsyncRueidis(flush time.Duration, opts ...redsync.Option) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		rc, err := rueidisClient(addr, ctr, flush)
		if err != nil {
			return nil, err
		}
		pool := rsrueidis.NewPool(rueidiscompat.NewAdapter(rc))
		return &rsClient{rs: redsync.New(pool), closer: closeFunc(rc.Close), opts: opts}, nil
	}
}

type rsLocker struct{ m *redsync.Mutex }

// renew extends the hold with redsync's Extend (a GET+PEXPIRE script).
func (l rsLocker) renew(ctx context.Context) error {
	ok, err := l.m.ExtendContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: extend failed")
	}
	return err
}

func (l rsLocker) lock(ctx context.Context) error {
	for {
		err := l.m.LockContext(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, redsync.ErrFailed):
			var taken *redsync.ErrTaken
			if !errors.As(err, &taken) {
				return err
			}
		}
	}
}

func (l rsLocker) unlock(ctx context.Context) error {
	_, err := l.m.UnlockContext(ctx)
	return err
}

// goredisClient dials addr through a counting connection.
func goredisClient(addr string, ctr *counter) *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr:     addr,
		PoolSize: 64,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(nc, ctr), nil
		},
	})
}

// bsm/redislock: Obtain is called again until it succeeds (naive: with its
// default NoRetry; tuned: with a linear backoff inside Obtain).

type blClient struct {
	c   *redislock.Client
	rdb *goredis.Client
	opt *redislock.Options
}

func openRedislock(opt *redislock.Options) func(string, *counter) (client, error) {
	return func(addr string, ctr *counter) (client, error) {
		rdb := goredisClient(addr, ctr)
		return &blClient{c: redislock.New(rdb), rdb: rdb, opt: opt}, nil
	}
}

func (c *blClient) locker(key string) (locker, error) {
	return &blLocker{c: c, key: key}, nil
}

func (c *blClient) close() { _ = c.rdb.Close() }

type blLocker struct {
	c   *blClient
	key string
	cur *redislock.Lock
}

func (l *blLocker) lock(ctx context.Context) error {
	for {
		lk, err := l.c.c.Obtain(ctx, l.key, ttl, l.c.opt)
		switch {
		case err == nil:
			l.cur = lk
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
	}
}

func (l *blLocker) unlock(ctx context.Context) error {
	return l.cur.Release(ctx)
}
