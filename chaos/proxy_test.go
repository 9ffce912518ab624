package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/rs/zerolog"

	"github.com/lockyard/lockyard/registry"
)

// newProxy starts an in-process toxiproxy from a free loopback port to
// upstream and returns it with its address.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "redis", "127.0.0.1:0", upstream)
	mustNil(t, p.Start())
	t.Cleanup(p.Stop)
	return p
}

// addToxic adds a toxic, given as toxiproxy's JSON, named name.
func addToxic(t *testing.T, p *toxiproxy.Proxy, name, js string) {
	t.Helper()
	_, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(`{"name":%q,%s}`, name, js)))
	mustNil(t, err)
}

func removeToxic(t *testing.T, p *toxiproxy.Proxy, name string) {
	t.Helper()
	mustNil(t, p.Toxics.RemoveToxic(context.Background(), name))
}

// splitPool hands out connections that dial when first used: through the
// proxy if the first command is PSUBSCRIBE (the registry's subscriber),
// directly otherwise. Faults then hit the pub/sub connection alone.
type splitPool struct{ direct, proxied string }

func (p splitPool) GetContext(ctx context.Context) (redis.Conn, error) {
	return &lazyConn{pool: p}, nil
}

type lazyConn struct {
	pool splitPool
	c    redis.Conn
}

func (c *lazyConn) dial(cmd string) (redis.Conn, error) {
	if c.c == nil {
		addr := c.pool.direct
		if cmd == "PSUBSCRIBE" {
			addr = c.pool.proxied
		}
		conn, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second))
		if err != nil {
			return nil, err
		}
		c.c = conn
	}
	return c.c, nil
}

func (c *lazyConn) Close() error {
	if c.c == nil {
		return nil
	}
	return c.c.Close()
}

func (c *lazyConn) Err() error {
	if c.c == nil {
		return nil
	}
	return c.c.Err()
}

func (c *lazyConn) Do(cmd string, args ...any) (any, error) {
	conn, err := c.dial(cmd)
	if err != nil {
		return nil, err
	}
	return conn.Do(cmd, args...)
}

func (c *lazyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	conn, err := c.dial(cmd)
	if err != nil {
		return nil, err
	}
	return redis.DoWithTimeout(conn, d, cmd, args...)
}

func (c *lazyConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	conn, err := c.dial(cmd)
	if err != nil {
		return nil, err
	}
	return redis.DoContext(conn, ctx, cmd, args...)
}

func (c *lazyConn) Send(cmd string, args ...any) error {
	conn, err := c.dial(cmd)
	if err != nil {
		return err
	}
	return conn.Send(cmd, args...)
}

func (c *lazyConn) Flush() error {
	conn, err := c.dial("")
	if err != nil {
		return err
	}
	return conn.Flush()
}

func (c *lazyConn) Receive() (any, error) { return c.c.Receive() }

func (c *lazyConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.c, ctx)
}

func (c *lazyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.c, d)
}

// pubsubClients counts the server's pub/sub connections.
func pubsubClients(t testing.TB, addr string) int {
	s, _ := redis.String(do(t, addr, "CLIENT", "LIST", "TYPE", "pubsub"), nil)
	return strings.Count(s, "\n")
}

// Scenario 7: the release message is delayed on the waiter's pub/sub
// connection (1s of latency through the proxy); the waiter still acquires
// within one poll interval of the release, by polling.
func TestMissedWakeUp(t *testing.T) {
	const (
		idle    = 200 * time.Millisecond
		latency = 1000 * time.Millisecond
		reps    = 5
	)
	srv := startServer(t)
	p := newProxy(t, srv.Addr)
	h := newRegistry(t, newPool(srv.Addr), "chaos7")
	w, err := registry.New(splitPool{direct: srv.Addr, proxied: p.Listen}, "chaos7",
		registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(idle), registry.WithLogger(testLogger(t)))
	mustNil(t, err)
	t.Cleanup(func() { w.Close() })
	hl, err := h.Obtain("k")
	mustNil(t, err)
	wl, err := w.Obtain("k")
	mustNil(t, err)

	// round makes one hand-over from h to w and returns its latency.
	round := func() time.Duration {
		mustNil(t, hl.LockContext(ctxFor(t, 5*time.Second)))
		got := lockAsync(ctxFor(t, 10*time.Second), wl, 0)
		waitFor(t, 5*time.Second, "the waiter's subscription", func() bool { return pubsubClients(t, srv.Addr) == 1 })
		time.Sleep(idle / 2) // the waiter's first attempt has failed
		released := mono()
		mustNil(t, hl.UnlockContext(context.Background()))
		a := <-got
		mustNil(t, a.err)
		return time.Duration(a.at - released)
	}
	var woken, polled []time.Duration
	for range reps {
		woken = append(woken, round())
	}
	addToxic(t, p, "lat", fmt.Sprintf(`"type":"latency","stream":"downstream","attributes":{"latency":%d}`, latency.Milliseconds()))
	for range reps {
		d := round()
		if d > idle+50*time.Millisecond {
			t.Errorf("with the wake-up delayed by %v, the waiter acquired %v after the release, want within one poll (%v)", latency, d, idle)
		}
		polled = append(polled, d)
	}
	removeToxic(t, p, "lat")
	figure(t, 7, "release -> waiter acquires: median %s with the wake-up (pub/sub), median %s / max %s with %v latency on the pub/sub connection (poll %v)",
		ms(median(woken)), ms(median(polled)), ms(polled[len(polled)-1]), latency, idle)
}

// Scenario 10: network faults between the registry and Redis. Whatever the
// fault, a LockContext that reports success holds the key (checked directly
// on the server), and no key outlives its TTL once the fault is gone.
func TestProxyFaults(t *testing.T) {
	const (
		ttl    = time.Second
		cmdTO  = 300 * time.Millisecond
		tries  = 8
		perTry = 500 * time.Millisecond
	)
	srv := startServer(t)
	cases := []struct{ name, toxic string }{
		{"latency", `"type":"latency","stream":"downstream","attributes":{"latency":400}`},
		{"timeout", `"type":"timeout","stream":"downstream","attributes":{"timeout":0}`},
		{"reset_peer", `"type":"reset_peer","stream":"upstream","attributes":{"timeout":1}`},
		{"slicer", `"type":"slicer","stream":"downstream","attributes":{"average_size":3,"size_variation":2,"delay":200}`},
		{"limit_data", `"type":"limit_data","stream":"downstream","attributes":{"bytes":40}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, srv.Addr)
			prefix := "chaos10-" + tc.name
			r := newRegistry(t, newPool(p.Listen), prefix, registry.WithExpireAfter(ttl),
				registry.WithCommandTimeout(cmdTO), registry.WithFencing())
			l, err := r.Obtain("k")
			mustNil(t, err)
			addToxic(t, p, tc.name, tc.toxic)
			var ok, failed, falseOK int
			var maxPTTL int64
			for range tries {
				err := l.LockContext(ctxFor(t, perTry))
				if pttl, _ := redis.Int64(do(t, srv.Addr, "PTTL", l.Key()), nil); pttl > maxPTTL {
					maxPTTL = pttl
				}
				if err != nil {
					failed++
					continue
				}
				ok++
				fence, _ := redis.Int64(do(t, srv.Addr, "GET", "{"+l.Key()+"}:fence"), nil)
				if n, _ := redis.Int(do(t, srv.Addr, "EXISTS", l.Key()), nil); n != 1 || fence != l.Token() {
					falseOK++
				}
				_ = l.UnlockContext(context.Background()) // may fail under the fault
			}
			removeToxic(t, p, tc.name)
			if falseOK > 0 {
				t.Errorf("%d successes without the key", falseOK)
			}
			if maxPTTL > ttl.Milliseconds() {
				t.Errorf("a lock key had PTTL %d ms > TTL", maxPTTL)
			}
			// Once the fault is gone no key outlives its TTL.
			time.Sleep(ttl + 50*time.Millisecond)
			keys, _ := redis.Strings(do(t, srv.Addr, "KEYS", prefix+":*"), nil)
			if len(keys) > 0 {
				t.Errorf("orphan keys after the TTL: %v", keys)
			}
			// And the registry works again.
			mustNil(t, l.LockContext(ctxFor(t, 3*time.Second)))
			mustNil(t, l.UnlockContext(context.Background()))
			figure(t, 10, "%s: %d of %d LockContext succeeded (each verified on the server), %d failed with an error, 0 false successes, 0 orphan keys after TTL (%v), max PTTL %d ms",
				tc.name, ok, tries, failed, ttl, maxPTTL)
		})
	}
}

// Scenario 11: a renewal whose reply arrives after the hold's validity
// ended does not revive it: validity counts from the renewal's send time.
func TestLateRenewalReply(t *testing.T) {
	const ttl = 600 * time.Millisecond
	srv := startServer(t)
	p := newProxy(t, srv.Addr)
	r := newRegistry(t, newPool(p.Listen), "chaos11", registry.WithExpireAfter(ttl))
	l, err := r.Obtain("k")
	mustNil(t, err)
	mustNil(t, l.LockContext(ctxFor(t, 3*time.Second)))
	lostAt := make(chan int64, 1)
	go func(lost <-chan struct{}) { <-lost; lostAt <- mono() }(l.Lost())
	addToxic(t, p, "lat", `"type":"latency","stream":"downstream","attributes":{"latency":1000}`)
	sent := mono()
	err = r.RenewLock(context.Background(), "k")
	returned := mono()
	mustIs(t, err, registry.ErrLockLost)
	at := <-lostAt
	if at > returned || time.Duration(at-sent) > ttl {
		t.Errorf("Lost() closed %v after the renewal was sent (TTL %v), RenewLock returned after %v",
			time.Duration(at-sent), ttl, time.Duration(returned-sent))
	}
	removeToxic(t, p, "lat")
	if !errors.Is(l.UnlockContext(context.Background()), registry.ErrLockLost) {
		t.Error("unlock after the late renewal did not report the loss")
	}
	figure(t, 11, "renewal reply delayed 1s past a %v TTL: Lost() closed %s after the renewal was sent (at the obtain's validity deadline); RenewLock returned ErrLockLost %s after the send, not a renewed hold",
		ttl, ms(time.Duration(at-sent)), ms(time.Duration(returned-sent)))
}
