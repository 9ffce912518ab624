package registry_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// inspect returns r.Inspect(key), failing the test on error.
func inspect(t *testing.T, r *registry.Registry, key string) registry.KeyInfo {
	t.Helper()
	info, err := r.Inspect(bg(t), key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return info
}

// registryOf returns the registry id in a token (the part before the last ':').
func registryOf(token string) string { return token[:strings.LastIndexByte(token, ':')] }

// Inspect, from a registry that neither holds nor waits, shows the lock's
// holder (its token, registry, label and TTL), the fence counter, and the
// registries that wait, oldest first, with their labels; once all is
// released, nothing.
func TestInspectLock(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithFencing(), registry.WithLockType(registry.PubSubLock), registry.WithExpireAfter(30 * time.Second)}
		a := newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithLabel("alpha"))...)
		wb := newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithLabel("beta"))...)
		wc := newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithLabel("gamma"))...)
		observer := newRegPrefix(t, b.pool(t), pfx)

		if info := inspect(t, observer, "order"); info.Kind != "" || len(info.Holders)+len(info.Waiters) != 0 || info.Fence != 0 {
			t.Fatalf("a free key: %+v, want nothing", info)
		}
		l := obtain(t, a, "order")
		mustNil(t, l.LockContext(bg(t)))
		lb, lc := obtain(t, wb, "order"), obtain(t, wc, "order")
		beta := lockAndHold(lb, func() error { return lb.LockContext(bg(t)) })
		waitQueued(t, b, l, 1)
		gamma := lockAndHold(lc, func() error { return lc.LockContext(bg(t)) })
		waitQueued(t, b, l, 2)

		info := inspect(t, observer, "order")
		token, err := redis.String(b.do(t, "GET", l.Key()), nil)
		mustNil(t, err)
		if info.Key != l.Key() || info.Kind != "lock" || info.Fence != l.Token() {
			t.Errorf("Key %q Kind %q Fence %d, want %q, lock, %d", info.Key, info.Kind, info.Fence, l.Key(), l.Token())
		}
		if len(info.Holders) != 1 {
			t.Fatalf("holders %+v, want one", info.Holders)
		}
		h := info.Holders[0]
		if h.Token != token || h.Registry != registryOf(token) || h.Label != "alpha" || h.TTL <= 0 || h.TTL > 30*time.Second {
			t.Errorf("holder %+v, want token %q of its registry, label alpha, a TTL within 30s", h, token)
		}
		var labels []string
		for _, w := range info.Waiters {
			labels = append(labels, w.Label)
			if w.Registry == h.Registry || w.Waiting < 0 || w.Waiting > time.Minute {
				t.Errorf("waiter %+v: not the holder's registry, and waiting a while", w)
			}
		}
		if !slices.Equal(labels, []string{"beta", "gamma"}) || info.Waiters[0].Waiting < info.Waiters[1].Waiting {
			t.Errorf("waiters %+v, want beta then gamma, oldest first", info.Waiters)
		}

		l.Unlock()
		recvWithin(t, beta.got, 5*time.Second, "beta's lock")
		if info := inspect(t, observer, "order"); len(info.Holders) != 1 || info.Holders[0].Label != "beta" || len(info.Waiters) != 1 || info.Waiters[0].Label != "gamma" {
			t.Errorf("after the release: %+v, want beta holding and gamma waiting", info)
		}
		mustNil(t, beta.unlock(t))
		recvWithin(t, gamma.got, 5*time.Second, "gamma's lock")
		mustNil(t, gamma.unlock(t))
		if info := inspect(t, observer, "order"); info.Kind != "" || len(info.Holders)+len(info.Waiters) != 0 {
			t.Errorf("all released: %+v, want nothing held or waited for", info)
		}
		// A waiter whose entry lapsed (it crashed) is not listed.
		q := queueKey(l.Key(), false)
		b.do(t, "ZADD", q, 1, "ghost/1")
		b.do(t, "HSET", strings.TrimSuffix(q, "queue")+"waiters", "ghost/1", "l 1 1")
		// And one whose entry lives but whose turn ended long ago, untaken.
		now := serverMillis(t, b)
		b.do(t, "ZADD", q, 2, "ghost/2")
		b.do(t, "HSET", strings.TrimSuffix(q, "queue")+"waiters", "ghost/2", fmt.Sprintf("l %d %d %d", now, now+60000, now-1000))
		if info := inspect(t, observer, "order"); len(info.Waiters) != 0 {
			t.Errorf("a lapsed entry, or one whose turn went by, listed: %+v", info.Waiters)
		}
	})
}

// A semaphore's holders are its permits, each with its own token and TTL;
// a lease of a lock is listed as the lock's holder.
func TestInspectSemaphoreAndLease(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		a := newRegPrefix(t, b.pool(t), pfx, registry.WithLabel("exporter"))
		observer := newRegPrefix(t, b.pool(t), pfx)
		s := semaphore(t, a, "exports", 3)
		p1, err := s.Acquire(bg(t), 10*time.Second)
		mustNil(t, err)
		p2, err := s.Acquire(bg(t), 20*time.Second)
		mustNil(t, err)
		info := inspect(t, observer, "exports")
		if info.Kind != "semaphore" || len(info.Holders) != 2 {
			t.Fatalf("%+v, want a semaphore with 2 holders", info)
		}
		for i, h := range info.Holders { // soonest expiry first
			want := []time.Duration{10 * time.Second, 20 * time.Second}[i]
			if h.Label != "exporter" || h.TTL <= want-5*time.Second || h.TTL > want {
				t.Errorf("permit %d: %+v, want label exporter and a TTL near %v", i, h, want)
			}
		}
		mustNil(t, p1.Release(bg(t)))
		mustNil(t, p2.Release(bg(t)))
		if info := inspect(t, observer, "exports"); info.Kind != "" || len(info.Holders) != 0 {
			t.Errorf("released: %+v, want nothing", info)
		}

		le, err := a.Acquire(bg(t), "job", 5*time.Second)
		mustNil(t, err)
		info = inspect(t, observer, "job")
		if info.Kind != "lock" || len(info.Holders) != 1 || info.Holders[0].Label != "exporter" {
			t.Errorf("a lease: %+v, want a lock held by exporter", info)
		}
		mustNil(t, le.Release(bg(t)))
	})
}

// A key that is no lock or semaphore is reported as such (ErrForeignKey);
// a bad key is refused with no command sent; the default label is the
// host name and process id.
func TestInspectForeignAndBadKeys(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx)
		b.do(t, "SET", pfx+":plain", "x")
		b.do(t, "HSET", pfx+":hash", "f", "v")
		for _, k := range []string{"plain", "hash"} {
			if info, err := r.Inspect(bg(t), k); !errors.Is(err, registry.ErrForeignKey) || len(info.Holders) != 0 {
				t.Errorf("Inspect(%q) = %+v, %v; want ErrForeignKey and no holder", k, info, err)
			}
		}
		l := obtain(t, r, "mine")
		mustNil(t, l.LockContext(bg(t)))
		host, _ := os.Hostname()
		if info := inspect(t, r, "mine"); len(info.Holders) != 1 || !strings.HasPrefix(info.Holders[0].Label, host+"/") {
			t.Errorf("%+v, want the default label %s/PID", info, host)
		}
		l.Unlock()
	})
	mr := newMiniredis(t)
	cp := &redistest.CountingPool{Pool: redistest.NewPool(mr.Addr())}
	r := newReg(t, cp)
	for _, k := range []string{"", strings.Repeat("k", registry.MaxKeyLen+1)} {
		if _, err := r.Inspect(bg(t), k); !errors.Is(err, registry.ErrInvalidKey) {
			t.Errorf("Inspect of a bad key: %v, want ErrInvalidKey", err)
		}
	}
	if cmds := cp.Commands(); len(cmds) != 0 {
		t.Errorf("commands sent for bad keys: %v, want none", cmds)
	}
	for _, label := range []string{"", strings.Repeat("x", registry.MaxLabelLen+1), "\xff"} {
		if _, err := registry.New(cp, "x", registry.WithLabel(label)); !errors.Is(err, registry.ErrInvalidConfig) {
			t.Errorf("WithLabel(%q): %v, want ErrInvalidConfig", label, err)
		}
	}
	r.Close()
	if _, err := r.Inspect(bg(t), "k"); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Inspect after Close: %v, want ErrClosed", err)
	}
}

// A label whose first publication failed is published again in the
// background a second later.
func TestLabelRetried(t *testing.T) {
	b := realBackend()
	fc := &faultyClient{Client: registry.NewPoolClient(b.pool(t)), script: "label", err: &registry.ReplyError{Err: errors.New("ERR injected")}, n: 1}
	pfx := prefix(t)
	r, err := registry.NewWithClient(fc, pfx, registry.WithLabel("late"), registry.WithLogger(discardLogger))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	le, err := r.Acquire(bg(t), "k", 0)
	mustNil(t, err)
	defer le.Release(bg(t))
	if info := inspect(t, r, "k"); len(info.Holders) != 1 || info.Holders[0].Label != "" {
		t.Fatalf("%+v, want the holder without a label (its publication failed)", info)
	}
	waitFor(t, 5*time.Second, "the label published again", func() bool {
		info := inspect(t, r, "k")
		return len(info.Holders) == 1 && info.Holders[0].Label == "late"
	})
}

// slowLabel delays the label script by d.
type slowLabel struct {
	registry.Client
	d time.Duration
}

func (c slowLabel) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "label" {
		select {
		case <-time.After(c.d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// A first attempt with a short deadline does not spend it on the label
// (published in the background instead); one with time to spare waits for
// it at most 200ms.
func TestLabelSparesShortDeadlines(t *testing.T) {
	b := realBackend()
	r, err := registry.NewWithClient(slowLabel{Client: registry.NewPoolClient(b.pool(t)), d: time.Second}, prefix(t), registry.WithLogger(discardLogger))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(bg(t), 150*time.Millisecond)
	defer cancel()
	l := obtain(t, r, "k")
	mustNil(t, l.TryLockContext(ctx)) // fails if the label's second is waited for
	l.Unlock()

	r2, err := registry.NewWithClient(slowLabel{Client: registry.NewPoolClient(b.pool(t)), d: time.Second}, prefix(t), registry.WithLogger(discardLogger))
	mustNil(t, err)
	t.Cleanup(func() { r2.Close() })
	start := time.Now()
	l2 := obtain(t, r2, "k")
	mustNil(t, l2.LockContext(bg(t)))
	l2.Unlock()
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("the first Lock took %v, want the label's wait cut at 200ms", d)
	}
}
