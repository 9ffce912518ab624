package chaos

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// oddKeys are keys that must round-trip byte for byte.
var oddKeys = []string{
	"{}", "{tag}", "a{b}c", ":", "a:b:c", "::", " ", "with space", "tab\tkey",
	"new\nline", "cr\rlf\n", "nul\x00byte", "\x00", "bad\xff\xfeutf8", "emoji 🔒🚀",
	"*", "?", "[", "a*b?c[d]", "\\", "\"quoted\"", "-channel:", strings.Repeat("k", registry.MaxKeyLen),
}

// Scenario 16: bad input. Odd keys round-trip exactly and never block one
// another, equal keys always do; invalid keys, durations and pools get
// sentinel errors; WRONGTYPE is a clear error after one attempt; a server
// that is not Redis gives an error within the timeout.
func TestBadInput(t *testing.T) {
	srv := startServer(t)
	t.Run("keys", func(t *testing.T) {
		rA := newRegistry(t, newPool(srv.Addr), "chaos16")
		rB := newRegistry(t, newPool(srv.Addr), "chaos16")
		var held []*registry.RedisLock
		for _, k := range oddKeys {
			l, err := rA.Obtain(k)
			mustNil(t, err)
			if !l.TryLock() {
				t.Fatalf("TryLock(%q) failed: a distinct key blocked it", k)
			}
			if n, _ := redis.Int(do(t, srv.Addr, "EXISTS", "chaos16:"+k), nil); n != 1 {
				t.Fatalf("key %q is not stored byte for byte", k)
			}
			held = append(held, l)
		}
		for _, k := range oddKeys { // equal keys block, from another registry
			l, err := rB.Obtain(k)
			mustNil(t, err)
			if l.TryLock() {
				t.Fatalf("a second registry took the held key %q", k)
			}
		}
		for _, l := range held {
			mustNil(t, l.UnlockContext(context.Background()))
		}
		keys, _ := redis.Strings(do(t, srv.Addr, "KEYS", "chaos16:*"), nil)
		if len(keys) != 0 {
			t.Fatalf("keys left after release: %q", keys)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		r := newRegistry(t, newPool(srv.Addr), "chaos16i")
		for _, k := range []string{"", strings.Repeat("k", registry.MaxKeyLen+1), strings.Repeat("k", 1<<20)} {
			_, err := r.Obtain(k)
			mustIs(t, err, registry.ErrInvalidKey)
		}
		pool := newPool(srv.Addr)
		defer pool.Close()
		for _, tc := range []struct {
			name string
			opt  registry.Option
		}{
			{"zero TTL", registry.WithExpireAfter(0)},
			{"negative TTL", registry.WithExpireAfter(-time.Second)},
			{"huge TTL", registry.WithExpireAfter(math.MaxInt64)},
			{"sub-ms TTL", registry.WithExpireAfter(time.Microsecond)},
			{"zero idle", registry.WithIdleBetweenTries(0)},
			{"negative idle", registry.WithIdleBetweenTries(-1)},
			{"huge idle", registry.WithIdleBetweenTries(registry.MaxDuration + 1)},
			{"zero timeout", registry.WithCommandTimeout(0)},
			{"zero capacity", registry.WithCacheCapacity(0)},
			{"nil logger", registry.WithLogger(nil)},
			{"nil option", nil},
		} {
			_, err := registry.New(pool, "p", tc.opt)
			if !errors.Is(err, registry.ErrInvalidConfig) {
				t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
			}
		}
		_, err := registry.New(nil, "p")
		mustIs(t, err, registry.ErrInvalidConfig)
		_, err = registry.New((*redis.Pool)(nil), "p")
		mustIs(t, err, registry.ErrInvalidConfig)
		_, err = registry.New(pool, "")
		mustIs(t, err, registry.ErrInvalidKey)
	})
	t.Run("wrongtype", func(t *testing.T) {
		r := newRegistry(t, newPool(srv.Addr), "chaos16w")
		// A first lock publishes the registry's label (one script, once):
		// counted below, it would not be the attempt's.
		warm, _ := r.Obtain("warm")
		mustNil(t, warm.LockContext(ctxFor(t, 5*time.Second)))
		warm.Unlock()
		l, _ := r.Obtain("h")
		do(t, srv.Addr, "HSET", l.Key(), "f", "v")
		before := scriptCalls(t, srv.Addr)
		err := l.LockContext(ctxFor(t, 5*time.Second))
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("LockContext on a hash: %v, want WRONGTYPE at once", err)
		}
		if n := scriptCalls(t, srv.Addr) - before; n > 2 {
			t.Fatalf("%d scripts for one attempt", n)
		}
		mustIs(t, l.UnlockContext(context.Background()), registry.ErrNotOwner)
	})
	t.Run("not redis", func(t *testing.T) {
		silent, err := net.Listen("tcp", "127.0.0.1:0")
		mustNil(t, err)
		go func() { // accepts and never answers
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				go func() {
					buf := make([]byte, 1024)
					for {
						if _, err := c.Read(buf); err != nil {
							c.Close()
							return
						}
					}
				}()
			}
		}()
		httpSrv := httptest.NewServer(http.NotFoundHandler())
		defer httpSrv.Close()
		const cmdTO, wait = 200 * time.Millisecond, 600 * time.Millisecond
		for _, tc := range []struct{ name, addr string }{
			{"silent listener", silent.Addr().String()},
			{"HTTP server", strings.TrimPrefix(httpSrv.URL, "http://")},
		} {
			pool := redistest.NewPool(tc.addr)
			r, err := registry.New(pool, "p", registry.WithCommandTimeout(cmdTO), registry.WithLogger(testLogger(t)))
			mustNil(t, err)
			l, _ := r.Obtain("k")
			start := time.Now()
			err = l.LockContext(ctxFor(t, wait))
			took := time.Since(start)
			if err == nil || took > wait+cmdTO {
				t.Errorf("%s: LockContext = %v after %v, want an error within %v", tc.name, err, took, wait)
			}
			start = time.Now()
			if l.TryLock() {
				t.Errorf("%s: TryLock succeeded", tc.name)
			}
			if d := time.Since(start); d > 2*cmdTO {
				t.Errorf("%s: TryLock took %v", tc.name, d)
			}
			r.Close()
			pool.Close()
			figure(t, 16, "%s: LockContext(%v) returned %q after %s; TryLock false", tc.name, wait, shorten(err), ms(took))
		}
		silent.Close()
	})
	figure(t, 16, "%d odd keys ({}, :, spaces, newline, NUL, invalid UTF-8, emoji, glob characters, %d bytes) round-trip exactly, never block each other, always block themselves; empty and over-%d-byte keys (1 MiB included) get ErrInvalidKey; 11 bad options and nil pools get ErrInvalidConfig; WRONGTYPE fails the first attempt",
		len(oddKeys), registry.MaxKeyLen, registry.MaxKeyLen)
}

func shorten(err error) string {
	s := err.Error()
	if len(s) > 90 {
		s = s[:90] + "..."
	}
	return s
}

// FuzzDistinctKeys: two keys block each other exactly when they are equal.
func FuzzDistinctKeys(f *testing.F) {
	for i, k := range oddKeys[:len(oddKeys)-1] {
		f.Add(k, oddKeys[(i+1)%(len(oddKeys)-1)])
		f.Add(k, k)
	}
	srv := startServer(f)
	pool := newPool(srv.Addr)
	defer pool.Close()
	rA, err := registry.New(pool, "fuzz", registry.WithLogger(testLogger(f)))
	if err != nil {
		f.Fatal(err)
	}
	defer rA.Close()
	rB, _ := registry.New(pool, "fuzz", registry.WithLogger(testLogger(f)))
	defer rB.Close()
	f.Fuzz(func(t *testing.T, a, b string) {
		la, errA := rA.Obtain(a)
		lb, errB := rB.Obtain(b)
		if errA != nil || errB != nil {
			if (errA != nil && !errors.Is(errA, registry.ErrInvalidKey)) || (errB != nil && !errors.Is(errB, registry.ErrInvalidKey)) {
				t.Fatalf("Obtain: %v / %v", errA, errB)
			}
			return
		}
		if !la.TryLock() {
			t.Fatalf("TryLock(%q) failed on a free key", a)
		}
		got := lb.TryLock()
		if got == (a == b) {
			t.Fatalf("keys %q and %q: second TryLock = %v", a, b, got)
		}
		if got {
			mustNil(t, lb.UnlockContext(context.Background()))
		}
		mustNil(t, la.UnlockContext(context.Background()))
	})
}
