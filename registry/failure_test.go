package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// After SCRIPT FLUSH the next call falls back from EVALSHA to EVAL, once,
// and no error reaches the caller. (Fencing makes the obtain a script, and
// WithScriptsOnly the release.)
func TestScriptFlushRecovery(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		cp := &redistest.CountingPool{Pool: b.pool(t)}
		l := obtain(t, newReg(t, cp, registry.WithFencing(), registry.WithScriptsOnly()), "k")
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
		b.do(t, "SCRIPT", "FLUSH")
		cp.Commands()
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
		want := []string{"EVALSHA", "EVAL", "EVALSHA", "EVAL"}
		if got := cp.Commands(); !slices.Equal(got, want) {
			t.Fatalf("commands after SCRIPT FLUSH = %v, want %v", got, want)
		}
	})
}

// Redis unreachable: LockContext returns an error matching ctx.Err() that
// wraps the network error; Lock() blocks, logging, and succeeds once the
// server is back.
func TestRedisUnreachableThenBack(t *testing.T) {
	srv, err := redistest.Start()
	mustNil(t, err)
	defer srv.Close()
	rec := &logRecorder{}
	r := newReg(t, srv.Pool(), registry.WithLogger(slog.New(rec)))
	l := obtain(t, r, "k")
	srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = l.LockContext(ctx)
	mustIs(t, err, context.DeadlineExceeded)
	var ne net.Error
	if !errors.As(err, &ne) {
		t.Fatalf("LockContext error %v does not wrap the network error", err)
	}
	if inGoroutine(l.TryLock) {
		t.Fatal("TryLock succeeded with Redis down")
	}

	locked := make(chan struct{})
	go func() {
		l.Lock()
		close(locked)
		l.Unlock()
	}()
	waitFor(t, 5*time.Second, "Lock to log a failure", func() bool { return rec.count(slog.LevelWarn, "obtain failed") > 0 })
	notWithin(t, locked, 100*time.Millisecond, "Lock returning with Redis down")
	mustNil(t, srv.Restart())
	recvWithin(t, locked, 10*time.Second, "Lock after Redis came back")
}

// A server that accepts connections but never answers: every call ends at
// the command timeout; nothing hangs, nothing panics, nothing stays held.
func TestSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustNil(t, err)
	defer ln.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	}()
	pool := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", ln.Addr().String())
	}}
	defer pool.Close()
	r := newReg(t, pool, registry.WithCommandTimeout(200*time.Millisecond), registry.WithLogger(slog.New(&logRecorder{})))
	l := obtain(t, r, "k")
	start := time.Now()
	if l.TryLock() {
		t.Fatal("TryLock succeeded against a silent server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	mustIs(t, l.LockContext(ctx), context.DeadlineExceeded)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("calls against a silent server took %v", el)
	}
	mustIs(t, l.UnlockContext(bg(t)), registry.ErrNotOwner)
}

// oddKeys are valid keys that need binary-safe handling.
var oddKeys = []string{"{tag}", "a:b", "with space", "tab\there", "new\nline", "nul\x00byte",
	"\xff\xfe invalid utf-8", "ключ", "🔒", "*", "?", "[a-z]", "\\", "a:b:", ":"}

// fuzzKeyPairs seeds f with pairs of odd keys (each with the next, and
// with itself) and an empty one, and returns the miniredis server the
// fuzz targets run on and a pool of it (closed when fuzzing ends).
func fuzzKeyPairs(f *testing.F) (*miniredis.Miniredis, *redis.Pool) {
	for i, k := range oddKeys {
		f.Add(k, oddKeys[(i+1)%len(oddKeys)])
		f.Add(k, k)
	}
	f.Add("", "x")
	mr := newMiniredis(f)
	pool := redistest.NewPool(mr.Addr())
	f.Cleanup(func() { pool.Close() })
	return mr, pool
}

// Odd keys round-trip exactly, never block each other, and block themselves.
func TestOddKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx)
		var locks []*registry.RedisLock
		for _, k := range oddKeys {
			l := obtain(t, r, k)
			if !l.TryLock() { // all held at once by one goroutine
				t.Fatalf("TryLock(%q) failed", k)
			}
			if inGoroutine(l.TryLock) {
				t.Fatalf("key %q did not block another goroutine", k)
			}
			if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 1 || l.Key() != pfx+":"+k {
				t.Fatalf("key %q not stored as %q", k, l.Key())
			}
			locks = append(locks, l)
		}
		for _, l := range locks {
			mustNil(t, l.UnlockContext(bg(t)))
			if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
				t.Fatalf("key %q left behind", l.Key())
			}
		}
		_, err := r.Obtain("")
		mustIs(t, err, registry.ErrInvalidKey)
		_, err = r.Obtain(string(make([]byte, registry.MaxKeyLen+1)))
		mustIs(t, err, registry.ErrInvalidKey)
		mustNil(t, obtain(t, r, string(make([]byte, registry.MaxKeyLen))).LockContext(bg(t)))
	})
}

// FuzzKeys: any two keys either both fail validation alike, or block each
// other exactly when they are equal, round-trip exactly into Redis, and
// read back by Inspect.
func FuzzKeys(f *testing.F) {
	mr, pool := fuzzKeyPairs(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		r, err := registry.New(pool, "fuzz", registry.WithLogger(slog.New(&logRecorder{})))
		mustNil(t, err)
		defer r.Close()
		la, err := r.Obtain(a)
		if a == "" || len(a) > registry.MaxKeyLen {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		mustNil(t, err)
		if la.Key() != "fuzz:"+a {
			t.Fatalf("Key() = %q, want %q", la.Key(), "fuzz:"+a)
		}
		mustNil(t, la.LockContext(context.Background()))
		defer la.Unlock()
		if !mr.Exists("fuzz:" + a) {
			t.Fatalf("key %q not in Redis", "fuzz:"+a)
		}
		if info, err := r.Inspect(context.Background(), a); err != nil || info.Key != "fuzz:"+a || info.Kind != "lock" || len(info.Holders) != 1 {
			t.Fatalf("Inspect(%q) = %+v, %v; want the one holder of fuzz:%s", a, info, err, a)
		}
		lb, err := r.Obtain(b)
		if err != nil {
			mustIs(t, err, registry.ErrInvalidKey)
			return
		}
		got := inGoroutine(func() bool {
			ok := lb.TryLock()
			if ok {
				lb.Unlock()
			}
			return ok
		})
		if got == (a == b) {
			t.Fatalf("keys %q and %q: second TryLock = %v", a, b, got)
		}
	})
}

// A server whose maxmemory-policy can evict lock keys gets one warning,
// before the registry's first obtain; noeviction gets none.
func TestEvictionPolicyWarning(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warns  int
	}{{"noeviction", 0}, {"volatile-lru", 1}, {"allkeys-lru", 1}} {
		t.Run(tc.policy, func(t *testing.T) {
			b := realBackend()
			b.do(t, "CONFIG", "SET", "maxmemory-policy", tc.policy)
			t.Cleanup(func() { b.do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction") })
			rec := &logRecorder{}
			l := obtain(t, newReg(t, b.pool(t), registry.WithLogger(slog.New(rec))), "k")
			for range 2 {
				mustNil(t, l.LockContext(bg(t)))
				mustNil(t, l.UnlockContext(bg(t)))
			}
			if n := rec.count(slog.LevelWarn, "maxmemory-policy"); n != tc.warns {
				t.Fatalf("%d eviction warnings, want %d", n, tc.warns)
			}
		})
	}
}

// A release whose pooled connection the server has closed (CLIENT KILL, a
// restart) is retried on a new one: Unlock reports nothing and the key is
// deleted.
func TestReleaseRetriesKilledConnection(t *testing.T) {
	b := realBackend()
	l := obtain(t, newReg(t, b.pool(t)), "k")
	mustNil(t, l.LockContext(bg(t)))
	b.do(t, "CLIENT", "KILL", "TYPE", "normal") // kills the idle pooled connection
	mustNil(t, l.UnlockContext(bg(t)))
	if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
		t.Fatal("the key survived the release")
	}
}

// When Redis goes away while fn runs, ExecuteLocked's error tells the
// release failure (ErrReleaseFailed, with the network error) from fn's own
// error, which it keeps.
func TestExecuteLockedReleaseFailed(t *testing.T) {
	s, pool := ownServer(t)
	r := newReg(t, pool, registry.WithCommandTimeout(500*time.Millisecond), registry.WithLogger(slog.New(&logRecorder{})))
	fnErr := errors.New("fn failed")
	for _, ret := range []error{nil, fnErr} {
		mustNil(t, s.Restart())
		err := r.ExecuteLocked(bg(t), "k", func(context.Context) error {
			s.Stop()
			return ret
		})
		mustIs(t, err, registry.ErrReleaseFailed)
		if errors.Is(err, registry.ErrLockLost) || errors.Is(err, fnErr) != (ret != nil) {
			t.Fatalf("fn returned %v; ExecuteLocked = %v: want ErrReleaseFailed, fn's error kept, no ErrLockLost", ret, err)
		}
	}
}

// The eviction-policy check that failed because Redis was down at the first
// obtain is made again once Redis answers: an evicting policy still gets
// its one warning.
func TestEvictionCheckRetried(t *testing.T) {
	s, pool := ownServer(t, "--maxmemory-policy", "allkeys-lru")
	rec := &logRecorder{}
	l := obtain(t, newReg(t, pool, registry.WithLogger(slog.New(rec)), registry.WithCommandTimeout(300*time.Millisecond)), "k")
	s.Stop()
	if inGoroutine(l.TryLock) {
		t.Fatal("TryLock succeeded with the server down")
	}
	mustNil(t, s.Restart())
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		mustNil(t, l.LockContext(ctx)) // retries the pooled connections the restart broke
		cancel()
		mustNil(t, l.UnlockContext(bg(t)))
	}
	if n := rec.count(slog.LevelWarn, "maxmemory-policy"); n != 1 {
		t.Fatalf("%d eviction warnings after Redis came back, want 1", n)
	}
}

// waiterThroughLink starts a PubSubLock registry whose connections pass
// through a LinkProxy, and a waiter of it on a key that another registry
// holds; it returns once the waiter's registry has subscribed to the key's
// release channel: the proxy (to freeze), the registry, its logs, and the
// waiter's result (LockContext's error: ErrClosed once the registry closes).
func waiterThroughLink(t *testing.T) (*redistest.LinkProxy, *registry.Registry, *logRecorder, <-chan error) {
	t.Helper()
	p := redistest.NewLinkProxy(t, real.Addr)
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", p.Addr()) }}
	t.Cleanup(func() { pool.Close() })
	pfx := prefix(t)
	holder := newRegPrefix(t, realBackend().pool(t), pfx)
	logs := &logRecorder{}
	r, err := registry.New(pool, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(time.Minute),
		registry.WithCommandTimeout(200*time.Millisecond), registry.WithLogger(slog.New(logs)))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	h := obtain(t, holder, "x")
	h.Lock()
	t.Cleanup(h.Unlock)
	l := obtain(t, r, "x")
	got := lockInBackground(t, l)
	waitFor(t, 5*time.Second, "the waiter's key subscribed", func() bool {
		return numsub(t, realBackend(), pfx+"-channel:"+l.Key()) == 1
	})
	return p, r, logs, got
}

// A registry's Close ends its subscriber's read at once, whatever the
// network does: on a connection that fell silent (a partition: nothing
// comes back) it neither waits for a reply nor for the read's bound (3 s
// after the last reply), nor drains the subscription (redigo's Close of a
// subscribed connection reads until the server has answered its
// UNSUBSCRIBE, with no bound of its own).
func TestCloseWithSilentSubscriber(t *testing.T) {
	p, r, _, got := waiterThroughLink(t)
	p.Freeze()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	mustNil(t, recvWithin(t, closed, 10*time.Second, "Close"))
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with a silent subscription, want no wait for the network", d)
	}
	mustIs(t, recvWithin(t, got, 5*time.Second, "the waiter"), registry.ErrClosed)
}

// failingPool hands out its pool's connections, whose Flush fails once,
// on a connection that subscribed, after arm is set.
type failingPool struct {
	p      *redis.Pool
	arm    atomic.Bool
	failed atomic.Int64
}

func (p *failingPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &failingConn{Conn: c, p: p}, nil
}

// failingConn passes every call to its redigo connection, but fails a
// Flush once its pool is armed, if it subscribed.
type failingConn struct {
	redis.Conn
	p   *failingPool
	sub bool
}

func (c *failingConn) Send(cmd string, args ...any) error {
	if cmd == "SUBSCRIBE" || cmd == "PSUBSCRIBE" {
		c.sub = true
	}
	return c.Conn.Send(cmd, args...)
}

func (c *failingConn) Flush() error {
	if c.sub && c.p.arm.CompareAndSwap(true, false) {
		c.p.failed.Add(1)
		return errors.New("injected send failure")
	}
	return c.Conn.Flush()
}

func (c *failingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}

func (c *failingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *failingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *failingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

// warnedWith reports whether h got a warning msg whose err attribute
// contains text.
func warnedWith(h *logRecorder, msg, text string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		found := false
		r.Attrs(func(a slog.Attr) bool {
			found = a.Key == "err" && strings.Contains(a.Value.String(), text)
			return !found
		})
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, msg) && found {
			return true
		}
	}
	return false
}

// A send on the subscription that fails (its PING, a SUBSCRIBE) ends the
// session, which the subscriber logs with the send's error, and it
// subscribes again: the waiter is woken by the release message.
func TestSubscriberResubscribesAfterFailedSend(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	fp := &failingPool{p: b.pool(t)}
	logs := &logRecorder{}
	holder := newRegPrefix(t, b.pool(t), pfx)
	r := newRegPrefix(t, fp, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(time.Minute),
		registry.WithLogger(slog.New(logs)))
	h := obtain(t, holder, "x")
	h.Lock()
	l := obtain(t, r, "x")
	got := lockInBackground(t, l)
	ch := pfx + "-channel:" + l.Key()
	waitFor(t, 5*time.Second, "the waiter's key subscribed", func() bool { return numsub(t, b, ch) == 1 })
	fp.arm.Store(true) // the subscriber's next PING fails: within a second
	waitFor(t, 5*time.Second, "the failed send", func() bool { return fp.failed.Load() == 1 })
	waitFor(t, 5*time.Second, "the session's end, logged", func() bool {
		return warnedWith(logs, "pub/sub subscriber dropped", "injected send failure")
	})
	waitFor(t, 5*time.Second, "the key subscribed again", func() bool { return numsub(t, b, ch) == 1 })
	h.Unlock()
	mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter, after the release"))
}

// A subscription whose connection falls silent (a partition: nothing comes
// back, not even pongs) is dropped within subscriberDead (3 s) of its
// last reply, and the subscriber subscribes again.
func TestSubscriberNoticesSilentLink(t *testing.T) {
	p, _, logs, _ := waiterThroughLink(t)
	p.Freeze()
	start := time.Now()
	waitFor(t, 10*time.Second, "the silent subscription dropped", func() bool {
		return logs.count(slog.LevelWarn, "pub/sub subscriber dropped") > 0
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the silent subscription was dropped %v after the link froze, want within its 3 s bound", d)
	}
}
