package clienttest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Native: the adapter's CommandClient on the server. SET IFEQ and the
// native delete reply in the types the registry reads (OK, nil, int64),
// or with a *registry.ReplyError where the server lacks them; PipelineOn
// runs the delete, PUBLISH and EXISTS in order; and a registry on the
// adapter renews and releases with the native commands where the server
// has them (the server's own command counts), without a fallback.
func Native(t *testing.T, a Adapter, addr string) {
	c := a.single(t, addr)
	cc, ok := c.(registry.CommandClient)
	if !ok {
		t.Fatalf("%T is not a registry.CommandClient", c)
	}
	caps, err := redistest.CapsOf(addr)
	redistest.MustNil(t, err)
	ctx := redistest.CtxFor(t, 5*time.Second)
	k := prefix(t) + ":k"
	res := cc.Pipeline(ctx, [][]any{{"SET", k, "v"}, {"SET", k, "v2", "IFEQ", "v", "PX", int64(5000)},
		{"SET", k, "v3", "IFEQ", "nope"}, {"GET", k}})
	if len(res) != 4 || res[0].Err != nil || res[0].Reply != "OK" {
		t.Fatalf("Pipeline: %+v", res)
	}
	if caps.SetIfEq {
		if res[1].Reply != "OK" || res[1].Err != nil || res[2].Reply != nil || res[2].Err != nil || res[3].Reply != "v2" {
			t.Fatalf("SET IFEQ: %+v, want OK, a nil reply (no error), v2", res[1:])
		}
	} else {
		var re *registry.ReplyError
		if !errors.As(res[1].Err, &re) || !strings.Contains(re.Error(), "syntax error") {
			t.Fatalf("SET IFEQ on %s %s: %v, want a syntax error reply", caps.Name, caps.Version, res[1].Err)
		}
		_, err := redistest.Do(addr, "SET", k, "v2")
		redistest.MustNil(t, err)
	}

	// The delete, the message and the read, in that order on one
	// connection: the subscriber hears the message after the key is gone.
	ch := prefix(t) + "-channel:x"
	psc := redis.PubSubConn{Conn: dial(t, addr)}
	redistest.MustNil(t, psc.Subscribe(ch))
	if _, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	del := []any{"DEL", k}
	switch {
	case caps.Del:
		del = []any{"DELEX", k, "IFEQ", "v2"}
	case caps.DelIf:
		del = []any{"DELIFEQ", k, "v2"}
	}
	res = cc.PipelineOn(ctx, k, [][]any{del, {"PUBLISH", ch, k}, {"EXISTS", k}})
	if len(res) != 3 || res[0].Reply != int64(1) || res[1].Reply != int64(1) || res[2].Reply != int64(0) {
		t.Fatalf("PipelineOn(%v, PUBLISH, EXISTS): %+v, want 1 (deleted), 1 (one subscriber), 0", del[0], res)
	}
	if m, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Message); !ok || string(m.Data) != k {
		t.Fatalf("the subscriber got %v, want the message %q", m, k)
	}

	// A registry on the adapter: where the server has them, no renew.lua
	// (its PEXPIRE) and no release.lua (its DEL) runs.
	r := NewRegistry(t, c, prefix(t))
	l, err := r.Obtain("k")
	redistest.MustNil(t, err)
	before, err := redistest.CommandStats(addr)
	redistest.MustNil(t, err)
	for range 3 {
		redistest.MustNil(t, l.LockContext(ctx))
		redistest.MustNil(t, r.RenewLock(ctx, "k"))
		redistest.MustNil(t, l.UnlockContext(ctx))
	}
	after, err := redistest.CommandStats(addr)
	redistest.MustNil(t, err)
	diff := func(cmd string) int { return after[cmd] - before[cmd] }
	want := func(has bool) int {
		if has {
			return 0
		}
		return 3
	}
	if diff("pexpire") != want(caps.SetIfEq) || diff("del") != want(caps.Native()) {
		t.Fatalf("on %s %s renew.lua ran %d times and release.lua %d, want %d and %d", caps.Name, caps.Version,
			diff("pexpire"), diff("del"), want(caps.SetIfEq), want(caps.Native()))
	}
	if n := r.Stats().NativeFallbacks; n != 0 {
		t.Fatalf("%d fallbacks, want none", n)
	}
	if n, _ := redis.Int(redistest.Do(addr, "EXISTS", l.Key())); n != 0 {
		t.Fatal("the key outlived its release")
	}
}

// dial returns a connection to addr, closed at the end of the test.
func dial(t *testing.T, addr string) redis.Conn {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second))
	redistest.MustNil(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
