package registry_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// backend is one Redis a test runs against: miniredis (mr set) or the real
// redis-server.
type backend struct {
	name string
	addr string
	mr   *miniredis.Miniredis
}

// forBackends runs fn as a subtest on miniredis and on the real server.
func forBackends(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		fn(t, &backend{name: "miniredis", addr: mr.Addr(), mr: mr})
	})
	t.Run("redis", func(t *testing.T) {
		fn(t, &backend{name: "redis", addr: real.Addr})
	})
}

// realBackend returns the real server as a backend.
func realBackend() *backend { return &backend{name: "redis", addr: real.Addr} }

// pool returns a pool closed at the end of the test.
func (b *backend) pool(t *testing.T) *redis.Pool {
	t.Helper()
	p := redistest.NewPool(b.addr)
	t.Cleanup(func() { p.Close() })
	return p
}

// do runs one command directly, failing the test on error.
func (b *backend) do(t *testing.T, cmd string, args ...any) any {
	t.Helper()
	v, err := redistest.Do(b.addr, cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

// expire makes the key's TTL run out: FastForward on miniredis, a deadline
// poll on the real server.
func (b *backend) expire(t *testing.T, key string, ttl time.Duration) {
	t.Helper()
	if b.mr != nil {
		b.mr.FastForward(ttl)
		return
	}
	waitFor(t, ttl+5*time.Second, "key "+key+" to expire", func() bool {
		n, _ := redis.Int(b.do(t, "EXISTS", key), nil)
		return n == 0
	})
}

var prefixSeq atomic.Int64

// prefix returns a registry key unique to the test.
func prefix(t *testing.T) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return fmt.Sprintf("lockyard-test.%s.%d", name, prefixSeq.Add(1))
}

// newReg returns a registry on pool with a unique prefix, closed at the end
// of the test.
func newReg(t *testing.T, pool registry.Pool, opts ...registry.Option) *registry.Registry {
	t.Helper()
	return newRegPrefix(t, pool, prefix(t), opts...)
}

func newRegPrefix(t testing.TB, pool registry.Pool, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.New(pool, prefix, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newRegClient returns a registry on the Client c with a unique prefix,
// closed at the end of the test.
func newRegClient(t *testing.T, c registry.Client, opts ...registry.Option) *registry.Registry {
	t.Helper()
	return newRegClientPrefix(t, c, prefix(t), opts...)
}

func newRegClientPrefix(t *testing.T, c registry.Client, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.NewWithClient(c, prefix, opts...)
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func obtain(t *testing.T, r *registry.Registry, key string) *registry.RedisLock {
	t.Helper()
	l, err := r.Obtain(key)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	return l
}

// queueKey returns the wait queue (sorted set) of the lock key lk, of the
// hash-tag form if hashTag.
func queueKey(lk string, hashTag bool) string { return wire.Layout{HashTag: hashTag}.QueueKey(lk) }

// queueLen returns the number of waiters queued for the lock key lk.
func queueLen(t *testing.T, b *backend, lk string, hashTag bool) int {
	t.Helper()
	n, _ := redis.Int(b.do(t, "ZCARD", queueKey(lk, hashTag)), nil)
	return n
}

// waitQueued polls until n waiters are queued for l's key.
func waitQueued(t *testing.T, b *backend, l *registry.RedisLock, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d waiters in the wait queue", n), func() bool { return queueLen(t, b, l.Key(), false) == n })
}

// waitFor is redistest.WaitFor: a deadline poll.
var waitFor = redistest.WaitFor

// inGoroutine runs fn in another goroutine and returns its result.
func inGoroutine[T any](fn func() T) T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return <-ch
}

// recvWithin returns the value from ch, failing the test if none comes in d.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// psubscribed returns a connection of its own to b, subscribed to pattern
// (the subscription confirmed), closed when the test ends.
func psubscribed(t *testing.T, b *backend, pattern string) redis.PubSubConn {
	t.Helper()
	c, err := redis.Dial("tcp", b.addr)
	mustNil(t, err)
	t.Cleanup(func() { c.Close() })
	ps := redis.PubSubConn{Conn: c}
	mustNil(t, ps.PSubscribe(pattern))
	if _, ok := ps.Receive().(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	return ps
}

// notWithin fails the test if ch yields a value within d.
func notWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s happened (%v), but should not have yet", what, v)
	case <-time.After(d):
	}
}

// logRecorder is a slog handler that keeps the records it gets.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level or above contain msg.
func (h *logRecorder) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level >= level && strings.Contains(r.Message, msg) {
			n++
		}
	}
	return n
}

// mustIs and mustNil fail the test at once on an unexpected error.
var (
	mustIs  = redistest.MustIs
	mustNil = redistest.MustNil
)

// bg returns a context for a test step that must finish well within 10s.
func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// holder holds a lock in a goroutine of its own until release is called.
type holder struct {
	release chan struct{}
	done    chan error // the UnlockContext result
}

// holdIn makes a new goroutine take l with TryLock and keep it until
// release; it reports whether the TryLock succeeded.
func holdIn(t *testing.T, l *registry.RedisLock) (*holder, bool) {
	t.Helper()
	h := &holder{release: make(chan struct{}), done: make(chan error, 1)}
	got := make(chan bool)
	go func() {
		ok := l.TryLock()
		got <- ok
		if !ok {
			return
		}
		<-h.release
		h.done <- l.UnlockContext(context.Background())
	}()
	ok := <-got
	if ok {
		t.Cleanup(func() { h.unlock() })
	}
	return h, ok
}

// unlock makes the holder release and returns its UnlockContext result; a
// second call returns nil.
func (h *holder) unlock() error {
	select {
	case <-h.release:
		return nil
	default:
	}
	close(h.release)
	return <-h.done
}

// newMiniredis starts a miniredis closed at the end of tb.
func newMiniredis(tb testing.TB) *miniredis.Miniredis {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(mr.Close)
	return mr
}

// lockInBackground makes a new goroutine wait for l with LockContext and
// release it at once; the channel gets the first error, or nil.
func lockInBackground(t *testing.T, l *registry.RedisLock) <-chan error {
	got := make(chan error, 1)
	ctx := bg(t)
	go func() {
		err := l.LockContext(ctx)
		if err == nil {
			err = l.UnlockContext(context.Background())
		}
		got <- err
	}()
	return got
}

// ownServer starts a redis-server of the test's own (redistest adds no
// persistence), with extra arguments, and a pool for it; both are closed
// at the end of the test.
func ownServer(t *testing.T, extra ...string) (*redistest.Server, *redis.Pool) {
	t.Helper()
	s, err := redistest.Start(extra...)
	mustNil(t, err)
	t.Cleanup(s.Close)
	pool := s.Pool()
	t.Cleanup(func() { pool.Close() })
	return s, pool
}

// waiter is a goroutine that takes a lock with lock, holds it until
// release is called, and unlocks it.
type waiter struct {
	got     chan struct{} // closed once it holds the lock
	release chan struct{}
	done    chan error // lock's error, or else UnlockContext's
}

// lockAndHold starts a waiter on l.
func lockAndHold(l *registry.RedisLock, lock func() error) *waiter {
	w := &waiter{got: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		if err := lock(); err != nil {
			w.done <- err
			return
		}
		close(w.got)
		<-w.release
		w.done <- l.UnlockContext(context.Background())
	}()
	return w
}

// unlock makes w release the lock and returns the outcome.
func (w *waiter) unlock(t *testing.T) error {
	t.Helper()
	close(w.release)
	return recvWithin(t, w.done, 5*time.Second, "the waiter's release")
}
