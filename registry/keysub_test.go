package registry_test

import (
	"context"
	"errors"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// numsub returns how many clients subscribe to channel ch (PUBSUB NUMSUB).
func numsub(t *testing.T, b *backend, ch string) int64 {
	t.Helper()
	v, err := redis.Values(b.do(t, "PUBSUB", "NUMSUB", ch), nil)
	if err != nil || len(v) != 2 {
		t.Fatalf("PUBSUB NUMSUB %s: %v %v", ch, v, err)
	}
	n, _ := v[1].(int64)
	return n
}

// A PubSubLock waiter's registry subscribes to the release channel of the
// key it waits for, not to every key's, and unsubscribes once nobody has
// waited for it for a while (keysub.go): releases of other keys are not
// delivered to it.
func TestSubscriberByKey(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := newRegPrefix(t, b.pool(t), pfx)
		idle := 50 * time.Millisecond
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(idle))
		h := obtain(t, holder, "x")
		h.Lock()
		l := obtain(t, r, "x")
		got := waitInGoroutine(t, l)
		waitFor(t, 5*time.Second, "the waiter's key subscribed", func() bool { return numsub(t, b, pfx+"-channel:"+l.Key()) == 1 })
		if lks, ok := registry.SubscribedKeys(r); !ok || !slices.Equal(lks, []string{l.Key()}) {
			t.Fatalf("subscribed keys %v (by channel: %v), want [%s]", lks, ok, l.Key())
		}
		if n, _ := redis.Int(b.do(t, "PUBSUB", "NUMPAT"), nil); n != 0 {
			t.Fatalf("%d pattern subscriptions, want 0", n)
		}
		if n := numsub(t, b, pfx+"-channel:"+pfx+":y"); n != 0 {
			t.Fatalf("another key's channel has %d subscribers", n)
		}
		h.Unlock()
		mustNil(t, recvWithin(t, got, 5*time.Second, "the waiter, after the release"))
		// Nobody waits any more: within 2 idles and a second it lets the
		// key go, at its next ping (a second).
		waitFor(t, 5*time.Second, "the key unsubscribed", func() bool { return numsub(t, b, pfx+"-channel:"+l.Key()) == 0 })
		if lks, _ := registry.SubscribedKeys(r); len(lks) != 0 {
			t.Fatalf("subscribed keys %v after the wait, want none", lks)
		}
	})
}

// A registry whose Client cannot subscribe by channel (a wrapper that
// hides the method) subscribes to the pattern, as before.
func TestSubscriberPatternWithoutChannels(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	holder := newRegPrefix(t, b.pool(t), pfx)
	c := struct{ registry.Client }{registry.NewPoolClient(b.pool(t))}
	r := newRegClientPrefix(t, c, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
	if _, ok := registry.SubscribedKeys(r); ok {
		t.Fatal("a Client without SubscribeChannels subscribes by channel")
	}
	h := obtain(t, holder, "x")
	h.Lock()
	l := obtain(t, r, "x")
	got := waitInGoroutine(t, l)
	waitFor(t, 5*time.Second, "the pattern subscribed", func() bool {
		n, _ := redis.Int(b.do(t, "PUBSUB", "NUMPAT"), nil)
		return n == 1
	})
	h.Unlock()
	mustNil(t, recvWithin(t, got, 2*time.Second, "the waiter, woken by the release"))
}

// hookedClient delays each SUBSCRIBE of a key's channel until before has
// run: what happens between a waiter's refused attempt and its
// subscription.
type hookedClient struct {
	registry.Client
	before func(channels []string)
}

func (c hookedClient) SubscribeChannels(ctx context.Context, channels ...string) (registry.ChannelSubscription, error) {
	sub, err := c.Client.(registry.ChannelSubscriber).SubscribeChannels(ctx, channels...)
	if err != nil {
		return nil, err
	}
	return hookedSub{sub, c.before}, nil
}

type hookedSub struct {
	registry.ChannelSubscription
	before func(channels []string)
}

func (s hookedSub) Subscribe(ctx context.Context, channels ...string) error {
	s.before(channels)
	return s.ChannelSubscription.Subscribe(ctx, channels...)
}

// A release between a waiter's refused attempt and its key's SUBSCRIBE is
// not missed: once the server has taken the SUBSCRIBE (the pong of the
// PING after it), the key's waiters try again. With a 10 s poll, a missed
// release would keep the waiter for 10 s.
func TestSubscriberByKeyMissesNoRelease(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	holder := newRegPrefix(t, b.pool(t), pfx)
	var once sync.Once
	var hb *registry.Lease
	c := hookedClient{Client: registry.NewPoolClient(b.pool(t)), before: func(channels []string) {
		if slices.Contains(channels, pfx+"-channel:"+pfx+":b") {
			once.Do(func() { mustNil(t, hb.Release(context.Background())) }) // released, and published, before the server has the SUBSCRIBE
		}
	}}
	r := newRegClientPrefix(t, c, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
	ha, err := holder.Acquire(bg(t), "a", 0)
	mustNil(t, err)
	la := obtain(t, r, "a")
	gotA := waitInGoroutine(t, la) // the session starts with a's channel
	waitFor(t, 5*time.Second, "a subscribed", func() bool { return numsub(t, b, pfx+"-channel:"+la.Key()) == 1 })
	hb, err = holder.Acquire(bg(t), "b", 0)
	mustNil(t, err)
	lb := obtain(t, r, "b")
	start := time.Now()
	mustNil(t, recvWithin(t, waitInGoroutine(t, lb), 3*time.Second, "the waiter on b, released before its SUBSCRIBE"))
	t.Logf("b acquired %v after its wait began", time.Since(start))
	mustNil(t, ha.Release(bg(t)))
	mustNil(t, recvWithin(t, gotA, 3*time.Second, "the waiter on a"))
}

// goroutinesCreated returns how many goroutines the process has created.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// A registry's subscriber on a redigo pool receives each message in its own
// goroutine (boundedReceiver): redigo's ReceiveContext would start one per
// message, with a context and a timer. And the registry's Close still ends
// the receive at once (it breaks the connection).
func TestSubscriberReceivesInline(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := newRegPrefix(t, b.pool(t), pfx)
		r, err := registry.New(b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(time.Minute))
		mustNil(t, err)
		h := obtain(t, holder, "x")
		h.Lock()
		defer h.Unlock()
		l := obtain(t, r, "x")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		got := make(chan error, 1)
		go func() { got <- l.LockContext(ctx) }()
		ch := pfx + "-channel:" + l.Key()
		waitFor(t, 5*time.Second, "the waiter's key subscribed", func() bool { return numsub(t, b, ch) == 1 })
		if goroutinesCreated() == 0 {
			t.Fatal("no /sched/goroutines-created metric")
		}
		// Messages on the key's channel, each a wake-up of the waiter (it
		// tries, and sleeps again).
		c := b.pool(t).Get()
		defer c.Close()
		const n = 400
		before := goroutinesCreated()
		for range n {
			mustNil(t, c.Send("PUBLISH", ch, l.Key()))
		}
		mustNil(t, c.Flush())
		for range n {
			if _, err := c.Receive(); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 5*time.Second, "no goroutine created for 50 ms", func() bool {
			a := goroutinesCreated()
			time.Sleep(50 * time.Millisecond)
			return goroutinesCreated() == a
		})
		created := goroutinesCreated() - before
		t.Logf("%d goroutines created for %d messages", created, n)
		if created >= n/2 {
			t.Fatalf("%d goroutines created while the subscriber received %d messages, want fewer than %d", created, n, n/2)
		}
		start := time.Now()
		cancel()
		if err := recvWithin(t, got, 5*time.Second, "the waiter"); !errors.Is(err, context.Canceled) {
			t.Fatalf("the wait ended with %v", err)
		}
		mustNil(t, r.Close())
		// Unbroken, the receive would end at the next pong of the
		// subscriber's own pings (one a second).
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("Close took %v with the subscriber receiving, want no wait", d)
		}
	})
}
