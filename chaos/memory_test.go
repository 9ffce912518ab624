package chaos

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// fill writes n values of 4 KiB under junk:*.
func fill(t *testing.T, addr string, n int) {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	mustNil(t, err)
	defer c.Close()
	val := strings.Repeat("x", 4096)
	for i := range n {
		mustNil(t, c.Send("SET", "junk:"+strconv.Itoa(i), val))
	}
	mustNil(t, c.Flush())
	for range n {
		if _, err := c.Receive(); err != nil {
			t.Fatal(err)
		}
	}
}

// Scenario 12: maxmemory. With noeviction, a new acquisition fails at once
// with a clear OOM error, while a current holder keeps renewing and can
// release. With an evicting policy, the registry warns at its first obtain,
// and a holder whose key is evicted learns of the loss at its next renewal.
func TestMaxmemory(t *testing.T) {
	const ttl = 900 * time.Millisecond
	srv := startServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	rA := newRegistry(t, newPool(srv.Addr), "chaos12", registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	a, _ := rA.Obtain("held")
	mustNil(t, a.LockContext(ctxFor(t, time.Second)))
	fill(t, srv.Addr, 500)                               // 2 MiB
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1mb") // now over the limit
	b, _ := newRegistry(t, newPool(srv.Addr), "chaos12").Obtain("new")
	start := mono()
	err := b.LockContext(ctxFor(t, 3*time.Second))
	took := time.Duration(mono() - start)
	var re redis.Error
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("acquire under OOM: %v, want a Redis OOM error", err)
	}
	if took > time.Second {
		t.Errorf("the OOM error took %v", took)
	}
	time.Sleep(ttl) // three renewal periods under OOM
	select {
	case <-a.Lost():
		t.Fatal("the holder lost its lock under OOM: renewals were refused")
	default:
	}
	mustNil(t, a.UnlockContext(context.Background()))
	if n, _ := redis.Int(do(t, srv.Addr, "EXISTS", a.Key()), nil); n != 0 {
		t.Fatal("release under OOM left the key")
	}

	// An evicting policy: volatile-ttl evicts the keys nearest to expiry
	// first, and lock keys are the only ones with a TTL here.
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
	logs := &logCounter{}
	rC, err := registry.New(newPool(srv.Addr), "chaos12", registry.WithExpireAfter(ttl), registry.WithAutoRenew(), registry.WithLogger(slog.New(logs)))
	mustNil(t, err)
	defer rC.Close()
	c, _ := rC.Obtain("evictable")
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "64mb") // room for the lock key
	mustNil(t, c.LockContext(ctxFor(t, time.Second)))
	if logs.count("maxmemory-policy") != 1 {
		t.Errorf("%d eviction-policy warnings, want 1", logs.count("maxmemory-policy"))
	}
	do(t, srv.Addr, "CONFIG", "SET", "maxmemory", "1mb") // evicts the only volatile key
	evicted := mono()
	if n, _ := redis.Int(do(t, srv.Addr, "EXISTS", c.Key()), nil); n != 0 {
		t.Fatal("the lock key was not evicted")
	}
	select {
	case <-c.Lost():
	case <-time.After(ttl):
		t.Fatal("eviction of the lock key was not reported")
	}
	learned := time.Duration(mono() - evicted)
	mustIs(t, c.UnlockContext(context.Background()), registry.ErrLockLost)
	figure(t, 12, "2 MiB of data over maxmemory 1mb, noeviction: acquire failed after %s with %q; the holder renewed for 3 periods and released; volatile-ttl: 1 start-up warning, eviction of the held key reported %s later (renewal period %v)",
		ms(took), strings.SplitN(string(re), ".", 2)[0], ms(learned), ttl/3)
}
