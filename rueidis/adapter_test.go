package rueidislock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

// The adapter's methods, called directly with the registry's own scripts.

// recorder is a Client that keeps the scripts the registry runs, by name
// (registry.Script has no exported constructor).
type recorder struct {
	registry.Client
	mu      sync.Mutex
	scripts map[string]*registry.Script
}

func (r *recorder) keep(s *registry.Script) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scripts[s.Name()] = s
}

func (r *recorder) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	r.keep(s)
	return r.Client.Eval(ctx, s, keys, args)
}

// scripts returns the registry's obtain, renew and release scripts, run
// once each on c. The lock is held by someone else for 50ms first: a lock
// that waited expects waiters, and releases with release.lua (one that
// did not would run drop.lua).
func scripts(t *testing.T, c rueidis.Client) map[string]*registry.Script {
	t.Helper()
	rec := &recorder{Client: rueidislock.NewClient(c), scripts: map[string]*registry.Script{}}
	pfx := prefix(t)
	r, err := registry.NewWithClient(rec, pfx, registry.WithLogger(clienttest.Quiet), registry.WithFencing()) // fencing: the obtain is a script
	mustNil(t, err)
	defer r.Close()
	l, err := r.Obtain("k")
	mustNil(t, err)
	ctx := ctxFor(t, 5*time.Second)
	mustNil(t, c.Do(ctx, c.B().Set().Key(l.Key()).Value("someone-else").Px(50*time.Millisecond).Build()).Error())
	mustNil(t, l.LockContext(ctxFor(t, 5*time.Second)))
	mustNil(t, r.RenewLock(ctxFor(t, 5*time.Second), "k"))
	mustNil(t, l.UnlockContext(ctxFor(t, 5*time.Second)))
	for _, n := range []string{"obtain", "renew", "release"} {
		if rec.scripts[n] == nil {
			t.Fatalf("the registry ran no %s script", n)
		}
	}
	return rec.scripts
}

// obtainArgs are obtain.lua's ARGV for token.
func obtainArgs(token string) []any {
	// ARGV of obtain.lua: token, TTL, the waiter's id, how it waits (0: a
	// TryLock, never queued), its poll interval and jitter, fencing, the
	// release channel, and the turn rules (window, ahead, slack).
	return []any{token, int64(10_000), "test-registry/1", int64(0), int64(100), int64(0), int64(0), "chan", int64(5), int64(20), int64(2)}
}

// lockKeys are the KEYS of obtain.lua for the lock key k (release.lua
// ignores the last; in Cluster, k's hash tag puts them all in its slot).
func lockKeys(k string) []string {
	return []string{k, k + ":queue", k + ":waiters", k + ":turn", k + ":polls", k + ":fence"}
}

// Eval returns RESP types, runs EVAL after a SCRIPT FLUSH, and wraps error
// replies in a ReplyError that also unwraps to rueidis's error.
func TestClientEval(t *testing.T) {
	c := newSingle(t)
	s := scripts(t, c)
	cl := rueidislock.NewClient(c)
	ctx := ctxFor(t, 5*time.Second)
	k := prefix(t) + ":k"
	mustNil(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	v, err := cl.Eval(ctx, s["obtain"], lockKeys(k), obtainArgs("tok"))
	mustNil(t, err)
	if x, ok := v.([]any); !ok || len(x) != 2 || x[0] != int64(1) || x[1] != int64(0) {
		t.Fatalf("obtain = %#v, want []any{int64(1), int64(0)}", v)
	}
	v, err = cl.Eval(ctx, s["obtain"], lockKeys(k), obtainArgs("other"))
	mustNil(t, err)
	if x, ok := v.([]any); !ok || len(x) != 3 || x[0] != int64(0) || x[1].(int64) <= 0 {
		t.Fatalf("obtain of a held key = %#v, want []any{int64(0), sleep, after}", v)
	}
	v, err = cl.Eval(ctx, s["release"], lockKeys(k), []any{"tok", "chan", int64(5), int64(20), int64(2)})
	mustNil(t, err)
	if v != int64(1) {
		t.Fatalf("release = %#v, want int64(1)", v)
	}
	list := prefix(t) + ":list"
	mustNil(t, c.Do(ctx, c.B().Lpush().Key(list).Element("x").Build()).Error())
	_, err = cl.Eval(ctx, s["obtain"], lockKeys(list), obtainArgs("tok"))
	var re *registry.ReplyError
	var rerr *rueidis.RedisError
	if !errors.As(err, &re) || !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("obtain of a list = %v (%T), want a ReplyError wrapping rueidis's WRONGTYPE", err, err)
	}
	// A network error is not a reply error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = cl.Eval(cctx, s["release"], []string{k}, []any{"tok", "chan"})
	if err == nil || errors.As(err, &re) {
		t.Fatalf("Eval with a cancelled context = %v, want a plain error", err)
	}
}

// EvalBatch returns one Result per call, in order, with each call's own
// error, after a SCRIPT FLUSH too, and beyond rueidis's BlockingPipeline
// (2000 commands), where it moves the batch to a pooled connection.
func TestClientEvalBatch(t *testing.T) {
	c := newSingle(t)
	s := scripts(t, c)
	cl := rueidislock.NewClient(c)
	ctx := ctxFor(t, 10*time.Second)
	pfx := prefix(t)
	held, free, list := pfx+":held", pfx+":free", pfx+":list"
	mustNil(t, c.Do(ctx, c.B().Set().Key(held).Value("someone").Build()).Error())
	mustNil(t, c.Do(ctx, c.B().Lpush().Key(list).Element("x").Build()).Error())
	mustNil(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	res := cl.EvalBatch(ctx, s["obtain"], []registry.Call{
		{Keys: lockKeys(free), Args: obtainArgs("tok")},
		{Keys: lockKeys(list), Args: obtainArgs("tok")},
		{Keys: lockKeys(held), Args: obtainArgs("tok")},
	})
	if len(res) != 3 {
		t.Fatalf("%d results for 3 calls", len(res))
	}
	if x, ok := res[0].Reply.([]any); res[0].Err != nil || !ok || x[0] != int64(1) {
		t.Errorf("free key: %#v", res[0])
	}
	var re *registry.ReplyError
	if !errors.As(res[1].Err, &re) || !strings.HasPrefix(res[1].Err.Error(), "WRONGTYPE") {
		t.Errorf("list key: %#v, want a WRONGTYPE ReplyError", res[1])
	}
	if x, ok := res[2].Reply.([]any); res[2].Err != nil || !ok || x[0] != int64(0) {
		t.Errorf("held key: %#v", res[2])
	}

	const n = 3000
	calls := make([]registry.Call, n)
	for i := range calls {
		k := pfx + ":many:" + strconv.Itoa(i)
		calls[i] = registry.Call{Keys: []string{k}, Args: []any{"tok" + strconv.Itoa(i%2), int64(10_000)}}
		if i%2 == 0 {
			mustNil(t, c.Do(ctx, c.B().Set().Key(k).Value("tok0").Build()).Error())
		}
	}
	for i, r := range cl.EvalBatch(ctx, s["renew"], calls) {
		if want := int64(1 - i%2); r.Err != nil || r.Reply != want {
			t.Fatalf("renewal %d: %#v, want %d", i, r, want)
		}
	}
	if res := cl.EvalBatch(ctx, s["renew"], nil); len(res) != 0 {
		t.Fatalf("empty batch: %d results", len(res))
	}
}

// EvalWait returns WAIT's count of the replicas that acknowledged the
// script's writes: 1 with a replica in sync, 0 without one.
func TestClientEvalWait(t *testing.T) {
	master, err := redistest.Start("--repl-diskless-sync-delay", "0")
	mustNil(t, err)
	t.Cleanup(master.Close)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica, err := redistest.Start("--replicaof", host, port)
	mustNil(t, err)
	t.Cleanup(replica.Close)
	waitFor(t, 20*time.Second, "the replica online", func() bool {
		info, _ := redigo.String(master.Do("INFO", "replication"))
		return strings.Contains(info, "state=online")
	})
	c := newClient(t, singleOptions(master.Addr))
	s := scripts(t, c)
	cl := rueidislock.NewClient(c)
	ctx := ctxFor(t, 10*time.Second)
	k := prefix(t) + ":k"
	mustNil(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	v, acked, err := cl.EvalWait(ctx, s["obtain"], lockKeys(k), obtainArgs("tok"), 1, 2*time.Second)
	mustNil(t, err)
	if x, ok := v.([]any); !ok || x[0] != int64(1) || acked != 1 {
		t.Fatalf("EvalWait = %#v, %d; want a grant acknowledged by 1 replica", v, acked)
	}
	start := time.Now()
	_, acked, err = cl.EvalWait(ctx, s["renew"], []string{k}, []any{"tok", int64(10_000)}, 2, 100*time.Millisecond)
	mustNil(t, err)
	if acked != 1 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("WAIT 2 with one replica: %d acknowledged after %v; want 1 after the timeout", acked, time.Since(start))
	}
	list := prefix(t) + ":list"
	mustNil(t, c.Do(ctx, c.B().Lpush().Key(list).Element("x").Build()).Error())
	_, acked, err = cl.EvalWait(ctx, s["obtain"], lockKeys(list), obtainArgs("tok"), 1, time.Second)
	var re *registry.ReplyError
	if !errors.As(err, &re) || acked != 0 {
		t.Fatalf("EvalWait of a failing script = %d, %v; want 0 and its ReplyError", acked, err)
	}
	// The shared connection is not blocked by WAIT: a concurrent Eval
	// returns long before a WAIT that times out.
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		_, _, _ = cl.EvalWait(ctx, s["renew"], []string{k}, []any{"tok", int64(10_000)}, 2, time.Second)
		done <- time.Since(start)
	}()
	time.Sleep(50 * time.Millisecond) // let WAIT block
	start = time.Now()
	_, err = cl.Eval(ctx, s["renew"], []string{k}, []any{"tok", int64(10_000)})
	mustNil(t, err)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Eval took %v while a WAIT blocked", d)
	}
	<-done
}

// Info returns the section's text, without RESP3's verbatim prefix.
func TestClientInfo(t *testing.T) {
	cl := rueidislock.NewClient(newSingle(t))
	info, err := cl.Info(ctxFor(t, 5*time.Second), "memory")
	mustNil(t, err)
	if !strings.HasPrefix(info, "# Memory") || !strings.Contains(info, "maxmemory_policy:noeviction") {
		t.Fatalf("INFO memory = %.80q...", info)
	}
}

// A Subscription receives the matching channels, a "" per pong, Pings
// concurrent with Receive, and an error once closed or once its
// connection is killed.
func TestClientSubscription(t *testing.T) {
	c := newSingle(t)
	cl := rueidislock.NewClient(c)
	pat := prefix(t)
	sub, err := cl.PSubscribe(ctxFor(t, 5*time.Second), pat+":*")
	mustNil(t, err)
	defer sub.Close()
	publish := func(ch string) {
		t.Helper()
		mustNil(t, c.Do(context.Background(), c.B().Publish().Channel(ch).Message("m").Build()).Error())
	}
	recv := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return sub.Receive(ctx)
	}
	publish("other")
	publish(pat + ":a")
	if ch, err := recv(); err != nil || ch != pat+":a" {
		t.Fatalf("Receive = %q, %v; want %q", ch, err, pat+":a")
	}
	mustNil(t, sub.Ping(ctxFor(t, 5*time.Second)))
	if ch, err := recv(); err != nil || ch != "" {
		t.Fatalf("Receive after Ping = %q, %v; want the pong", ch, err)
	}
	// Nothing more: a Receive ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = sub.Receive(ctx)
	cancel()
	mustIs(t, err, context.DeadlineExceeded)

	// 100 pings from another goroutine while 100 messages arrive.
	const n = 100
	pinged := make(chan error, 1)
	go func() {
		for range n {
			if err := sub.Ping(context.Background()); err != nil {
				pinged <- err
				return
			}
		}
		pinged <- nil
	}()
	for i := range n {
		publish(pat + ":" + strconv.Itoa(i))
	}
	msgs, pongs := 0, 0
	for msgs+pongs < 2*n {
		ch, err := recv()
		mustNil(t, err)
		if ch == "" {
			pongs++
		} else {
			msgs++
		}
	}
	mustNil(t, <-pinged)
	if msgs != n || pongs != n {
		t.Fatalf("%d messages and %d pongs, want %d and %d", msgs, pongs, n, n)
	}

	// The server drops the connection: Receive fails, and keeps failing.
	_, err = redistest.Do(single.Addr, "CLIENT", "KILL", "TYPE", "pubsub")
	mustNil(t, err)
	if _, err := recv(); err == nil {
		t.Fatal("Receive after CLIENT KILL succeeded")
	}
	if _, err := recv(); err == nil {
		t.Fatal("a second Receive after CLIENT KILL succeeded")
	}
	if sub.Ping(ctxFor(t, time.Second)) == nil {
		t.Fatal("Ping after CLIENT KILL succeeded")
	}
	mustNil(t, sub.Close())
}

// Close ends a Receive in progress at once, later Receives fail, and a
// second Close is a no-op; a PSubscribe whose context has ended fails.
func TestClientSubscriptionClose(t *testing.T) {
	c := newSingle(t)
	cl := rueidislock.NewClient(c)
	sub, err := cl.PSubscribe(ctxFor(t, 5*time.Second), prefix(t)+":*")
	mustNil(t, err)
	got := make(chan error, 1)
	go func() {
		_, err := sub.Receive(context.Background())
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let Receive block
	start := time.Now()
	mustNil(t, sub.Close())
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("Receive returned no error after Close")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Receive still blocked 2s after Close")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if _, err := sub.Receive(context.Background()); err == nil {
		t.Fatal("Receive after Close succeeded")
	}
	mustNil(t, sub.Close())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s, err := cl.PSubscribe(ctx, "x*"); err == nil {
		s.Close()
		t.Fatal("PSubscribe with a cancelled context succeeded")
	}
}

// A subscriber that stops reading blocks only its own connection: the
// client's other commands go on, and Close still returns.
func TestClientSubscriptionSlowReader(t *testing.T) {
	c := newSingle(t)
	cl := rueidislock.NewClient(c)
	pat := prefix(t)
	sub, err := cl.PSubscribe(ctxFor(t, 5*time.Second), pat+":*")
	mustNil(t, err)
	for i := range 1000 {
		mustNil(t, c.Do(context.Background(), c.B().Publish().Channel(pat+":"+strconv.Itoa(i)).Message("m").Build()).Error())
	}
	if !strings.Contains(mustInfo(t, cl), "maxmemory_policy") {
		t.Fatal("INFO failed while a subscriber lagged")
	}
	start := time.Now()
	mustNil(t, sub.Close())
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a full queue", d)
	}
}

func mustInfo(t *testing.T, cl *rueidislock.Client) string {
	t.Helper()
	info, err := cl.Info(ctxFor(t, 5*time.Second), "memory")
	mustNil(t, err)
	return info
}

// clientAs returns the adapter on the single-node server, logged in as a
// user of its own with the ACL rules given (deleted at the end of the test).
func clientAs(t *testing.T, rules ...string) *rueidislock.Client {
	t.Helper()
	user := "acl-" + strconv.FormatInt(prefixSeq.Add(1), 10)
	_, err := redistest.Do(single.Addr, "ACL", append([]any{"SETUSER", user, "on", ">pw"}, anys(rules)...)...)
	mustNil(t, err)
	t.Cleanup(func() { _, _ = redistest.Do(single.Addr, "ACL", "DELUSER", user) })
	opt := singleOptions(single.Addr)
	opt.Username, opt.Password = user, "pw"
	return rueidislock.NewClient(newClient(t, opt))
}

// anys returns ss as a []any.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Under an ACL that refuses SUBSCRIBE, SubscribeChannels's error is the
// server's NOPERM (a registry.ReplyError), and a registry on the adapter
// falls back to the pattern: its waiter still hears the release, long
// before its 10 s poll.
func TestSubscribeRefusedFallsBackToPattern(t *testing.T) {
	c := clientAs(t, "~*", "&*", "+@all", "-subscribe")

	sub, err := c.SubscribeChannels(ctxFor(t, 5*time.Second), "some-channel")
	var re *registry.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOPERM") || sub != nil {
		t.Fatalf("SubscribeChannels = %v, %v (%T); want nil and the server's NOPERM as a registry.ReplyError", sub, err, err)
	}

	pfx := prefix(t)
	holder := newRegistry(t, newSingle(t), pfx)
	le, err := holder.Acquire(ctxFor(t, 5*time.Second), "k", 0)
	mustNil(t, err)
	r := clienttest.NewRegistry(t, c, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))
	l, err := r.Obtain("k")
	mustNil(t, err)
	got := make(chan error, 1)
	go func() {
		err := l.LockContext(ctxFor(t, 8*time.Second))
		if err == nil {
			l.Unlock()
		}
		got <- err
	}()
	waitFor(t, 5*time.Second, "the waiter's pattern subscription", func() bool {
		n, err := redigo.Int(redistest.Do(single.Addr, "PUBSUB", "NUMPAT"))
		return err == nil && n > 0
	})
	released := time.Now()
	mustNil(t, le.Release(ctxFor(t, 5*time.Second)))
	mustNil(t, <-got)
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("the waiter took the lock %v after the release; want it woken by the release", d)
	}
}

// A subscription's refused SUBSCRIBE ends it, as a broken connection does
// (registry.ChannelSubscription): Receive returns the refusal. A refused
// PSubscribe returns a nil Subscription, not a nil pointer in one.
func TestChannelSubscriptionRefusalEndsIt(t *testing.T) {
	c := clientAs(t, "~*", "resetchannels", "&ok*", "+@all")

	if ps, err := c.PSubscribe(ctxFor(t, 5*time.Second), "bad*"); ps != nil || err == nil {
		t.Fatalf("PSubscribe(bad*) = %v, %v; want nil and NOPERM", ps, err)
	}
	sub, err := c.SubscribeChannels(ctxFor(t, 5*time.Second), "ok-1")
	mustNil(t, err)
	defer sub.Close()
	err = sub.Subscribe(ctxFor(t, 5*time.Second), "bad-1")
	var re *registry.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOPERM") {
		t.Fatalf("Subscribe(bad-1) = %v; want the server's NOPERM", err)
	}
	_, err = sub.Receive(ctxFor(t, 2*time.Second))
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOPERM") {
		t.Fatalf("Receive after the refusal = %v; want the refusal", err)
	}
}
