package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

var discardLogger = slog.New(slog.DiscardHandler)

// redlockNodes starts n redis-servers, closed at the end of the test, and
// returns them with one Client each.
func redlockNodes(t *testing.T, n int) ([]*redistest.Server, []registry.Client) {
	t.Helper()
	var (
		servers []*redistest.Server
		clients []registry.Client
	)
	for range n {
		s, p := ownServer(t)
		servers = append(servers, s)
		clients = append(clients, registry.NewPoolClient(p))
	}
	return servers, clients
}

func newRedlock(t *testing.T, clients []registry.Client, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	r, err := registry.NewRedlock(clients, prefix, opts...)
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRedlockConfig(t *testing.T) {
	_, clients := redlockNodes(t, 3)
	for _, c := range []struct {
		clients []registry.Client
		opts    []registry.Option
	}{
		{clients[:2], nil},
		{append(clients[:3:3], clients[0]), nil}, // 4 nodes
		{[]registry.Client{clients[0], clients[1], clients[0]}, nil},
		{[]registry.Client{clients[0], clients[1], nil}, nil},
		{clients, []registry.Option{registry.WithReplicaAck(1, time.Second)}},
	} {
		if _, err := registry.NewRedlock(c.clients, "x", c.opts...); !errors.Is(err, registry.ErrInvalidConfig) {
			t.Errorf("NewRedlock(%d clients) = %v, want ErrInvalidConfig", len(c.clients), err)
		}
	}
}

// Redlock over 5 servers: works with 2 down, fails with ErrNoQuorum with 3
// down, and works again when they are back.
func TestRedlockNodesDown(t *testing.T) {
	servers, clients := redlockNodes(t, 5)
	r := newRedlock(t, clients, prefix(t), registry.WithFencing(), registry.WithExpireAfter(5*time.Second))
	l := obtain(t, r, "k")
	lockOnce := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if err := l.LockContext(ctx); err != nil {
			return err
		}
		return l.UnlockContext(ctx)
	}
	mustNil(t, lockOnce(5*time.Second))
	servers[0].Stop()
	servers[1].Stop()
	mustNil(t, lockOnce(5*time.Second))
	servers[2].Stop()
	err := lockOnce(500 * time.Millisecond)
	mustIs(t, err, registry.ErrNoQuorum)
	mustIs(t, err, context.DeadlineExceeded)
	if l.TryLock() {
		t.Fatal("TryLock succeeded with 3 of 5 nodes down")
	}
	for _, s := range servers[:3] {
		mustNil(t, s.Restart())
	}
	mustNil(t, lockOnce(5*time.Second))
}

// A lock held by another on a majority is not granted; one the obtain won
// only on a minority is undone there.
func TestRedlockMinorityUndone(t *testing.T) {
	servers, clients := redlockNodes(t, 5)
	pfx := prefix(t)
	r := newRedlock(t, clients, pfx)
	l := obtain(t, r, "k")
	for _, s := range servers[:3] {
		if _, err := s.Do("SET", l.Key(), "someone-else", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	if l.TryLock() {
		t.Fatal("granted while another holds a majority")
	}
	for _, s := range servers[3:] {
		if n, _ := redis.Int(s.Do("EXISTS", l.Key())); n != 0 {
			t.Fatalf("a minority acquisition was left on %s", s.Addr)
		}
	}
	// With the other's key on 2 nodes only, 3 of 5 is a majority.
	if _, err := servers[2].Do("DEL", l.Key()); err != nil {
		t.Fatal(err)
	}
	mustNil(t, l.LockContext(bg(t)))
	mustNil(t, l.UnlockContext(bg(t)))
	for _, s := range servers[:2] {
		if v, _ := redis.String(s.Do("GET", l.Key())); v != "someone-else" {
			t.Fatalf("the release touched another holder's key on %s: %q", s.Addr, v)
		}
	}
}

// Contention between three Redlock registries, with one node down: no
// two holders at once, and fencing tokens grow in the order of the holds.
func TestRedlockContention(t *testing.T) {
	servers, clients := redlockNodes(t, 5)
	servers[4].Stop()
	pfx := prefix(t)
	type span struct {
		from, to time.Time
		token    int64
	}
	var (
		mu    sync.Mutex
		spans = map[string][]span{}
		wg    sync.WaitGroup
	)
	for i := range 3 {
		r := newRedlock(t, clients, pfx, registry.WithFencing(), registry.WithLockType(registry.LockType(i%2)),
			registry.WithIdleBetweenTries(5*time.Millisecond), registry.WithLogger(discardLogger))
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := []string{"x", "y"}[(i+g)%2]
				l := obtain(t, r, key)
				for range 30 {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err := l.LockContext(ctx)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					s := span{from: time.Now(), token: l.Token()}
					time.Sleep(100 * time.Microsecond) // the critical section's work
					s.to = time.Now()
					mu.Lock()
					spans[key] = append(spans[key], s)
					mu.Unlock()
					if err := l.UnlockContext(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	total, overlaps, regress := 0, 0, 0
	for _, list := range spans {
		sort.Slice(list, func(i, j int) bool { return list[i].from.Before(list[j].from) })
		for i := 1; i < len(list); i++ {
			if list[i].from.Before(list[i-1].to) {
				overlaps++
			}
			if list[i].token <= list[i-1].token {
				regress++
			}
		}
		total += len(list)
	}
	t.Logf("FIGURE redlock contention: %d acquisitions by 3 registries x 3 goroutines on 2 keys, 5 nodes with 1 down: %d overlaps, %d fencing tokens out of order", total, overlaps, regress)
	if total != 3*3*30 || overlaps != 0 || regress != 0 {
		t.Fatalf("%d acquisitions, %d overlaps, %d tokens out of order", total, overlaps, regress)
	}
}

// Fencing tokens keep growing when the majority changes: the counter of
// the winning majority is written back to it, so a later majority that
// shares one node with it counts on from there.
func TestRedlockFenceAcrossMajorities(t *testing.T) {
	servers, clients := redlockNodes(t, 3)
	r := newRedlock(t, clients, prefix(t), registry.WithFencing())
	l := obtain(t, r, "k")
	fence := "{" + l.Key() + "}:fence"
	// Counters at 10, 0 and 0 (a missing one would start at the server's
	// clock, far above).
	for i, n := range []int{10, 0, 0} {
		if _, err := servers[i].Do("SET", fence, n); err != nil {
			t.Fatal(err)
		}
	}
	var tokens []int64
	take := func() {
		t.Helper()
		mustNil(t, l.LockContext(bg(t)))
		tokens = append(tokens, l.Token())
		mustNil(t, l.UnlockContext(bg(t)))
	}
	take()                           // nodes 0, 1, 2: 11, written back to all three
	servers[0].Stop()                // the node with the high counter leaves
	take()                           // nodes 1, 2
	mustNil(t, servers[0].Restart()) // back, empty: counter 0
	if _, err := servers[0].Do("SET", fence, 0); err != nil {
		t.Fatal(err)
	}
	servers[1].Stop()
	take() // nodes 0, 2: node 2 carries the count
	if tokens[0] != 11 || tokens[1] != 12 || tokens[2] != 13 {
		t.Fatalf("tokens %v, want [11 12 13]", tokens)
	}
}

// Renewals need a majority: with 2 of 5 nodes down the watchdog keeps a
// hold past several TTLs; with a third down the hold runs out and Lost
// says so.
func TestRedlockRenewal(t *testing.T) {
	servers, clients := redlockNodes(t, 5)
	const ttl = 600 * time.Millisecond
	r := newRedlock(t, clients, prefix(t), registry.WithAutoRenew(), registry.WithExpireAfter(ttl), registry.WithLogger(discardLogger))
	l := obtain(t, r, "k")
	servers[0].Stop()
	servers[1].Stop()
	mustNil(t, l.LockContext(bg(t)))
	until := time.Now().Add(3 * ttl)
	waitFor(t, 5*time.Second, "three TTLs", func() bool {
		select {
		case <-l.Lost():
			t.Fatal("hold lost while a majority renews it")
		default:
		}
		return time.Now().After(until)
	})
	servers[2].Stop()
	recvWithin(t, l.Lost(), 2*ttl, "the hold to be lost without a renewing majority")
	mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
}

// blackhole is a Client whose node never answers: every call returns
// ctx.Err() when its context ends, as go-redis does.
type blackhole struct{ id int }

func (blackhole) Eval(ctx context.Context, _ *registry.Script, _ []string, _ []any) (any, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (blackhole) EvalWait(ctx context.Context, _ *registry.Script, _ []string, _ []any, _ int, _ time.Duration) (any, int, error) {
	<-ctx.Done()
	return nil, 0, ctx.Err()
}

func (blackhole) EvalBatch(ctx context.Context, _ *registry.Script, calls []registry.Call) []registry.Result {
	<-ctx.Done()
	out := make([]registry.Result, len(calls))
	for i := range out {
		out[i].Err = ctx.Err()
	}
	return out
}

func (blackhole) PSubscribe(ctx context.Context, _ string) (registry.Subscription, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// When every node times out, a LockContext that runs out of time still
// says why: its error matches ErrNoQuorum as well as DeadlineExceeded,
// although the nodes' own errors were deadline errors too.
func TestRedlockSilentNodesKeepsNoQuorum(t *testing.T) {
	r := newRedlock(t, []registry.Client{&blackhole{1}, &blackhole{2}, &blackhole{3}}, prefix(t))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := obtain(t, r, "k").LockContext(ctx)
	mustIs(t, err, context.DeadlineExceeded)
	mustIs(t, err, registry.ErrNoQuorum)
}

// NewRedlock checks the options before the registry key.
func TestRedlockChecksOptionsFirst(t *testing.T) {
	_, err := registry.NewRedlock([]registry.Client{&blackhole{1}, &blackhole{2}, &blackhole{3}}, "{bad", registry.WithReplicaAck(1, time.Second))
	mustIs(t, err, registry.ErrInvalidConfig)
}

// A client that returns ctx.Err() as it is (go-redis) does not make the
// wait's error say it twice: "context deadline exceeded (last error:
// context deadline exceeded)".
func TestWaitErrorDoesNotStutter(t *testing.T) {
	r, err := registry.NewWithClient(&blackhole{1}, prefix(t), registry.WithLogger(slog.New(&logRecorder{})))
	mustNil(t, err)
	t.Cleanup(func() { r.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = obtain(t, r, "k").LockContext(ctx)
	mustIs(t, err, context.DeadlineExceeded)
	if s := err.Error(); strings.Count(s, "deadline exceeded") != 1 || strings.Count(s, "lockyard:") != 1 {
		t.Fatalf("LockContext = %q: want one deadline and one lockyard: prefix", s)
	}
}

// On Redlock, LockFor's TTL is each node's key TTL, and RenewLockFor's too.
func TestRedlockLockFor(t *testing.T) {
	servers, clients := redlockNodes(t, 3)
	r := newRedlock(t, clients, prefix(t)) // expireAfter 60s
	l := obtain(t, r, "k")
	mustNil(t, l.LockFor(bg(t), 2*time.Second))
	defer l.Unlock()
	check := func(max int64) {
		t.Helper()
		for i, s := range servers {
			p, err := redis.Int64(s.Do("PTTL", l.Key()))
			mustNil(t, err)
			if p <= max/2 || p > max {
				t.Fatalf("node %d: PTTL %d ms, want at most %d", i, p, max)
			}
		}
	}
	check(2000)
	mustNil(t, r.RenewLockFor(bg(t), "k", time.Second))
	check(1000)
}

// Inspect on Redlock reports what a majority of the nodes hold: a lock
// deleted behind its back on one node of three is still held.
func TestRedlockInspectMajority(t *testing.T) {
	nodes, clients := redlockNodes(t, 3)
	pfx := prefix(t)
	r := newRedlock(t, clients, pfx)
	l := obtain(t, r, "k")
	mustNil(t, l.LockContext(bg(t)))
	defer l.Unlock()
	if _, err := nodes[0].Do("DEL", l.Key()); err != nil {
		t.Fatal(err)
	}
	info, err := r.Inspect(bg(t), "k")
	if err != nil || info.Kind != "lock" || len(info.Holders) != 1 {
		t.Fatalf("Inspect with the key on 2 of 3 nodes: %+v, %v; want the holder", info, err)
	}
	// The label is read from any node that has it.
	if _, err := nodes[0].Do("DEL", wire.Layout{Registry: pfx}.LabelKey(info.Holders[0].Registry)); err != nil {
		t.Fatal(err)
	}
	if info, err := r.Inspect(bg(t), "k"); err != nil || info.Holders[0].Label == "" {
		t.Fatalf("Inspect with the label gone from node 0: %+v, %v; want the label of another node", info, err)
	}
	if _, err := nodes[1].Do("DEL", l.Key()); err != nil {
		t.Fatal(err)
	}
	if info, err := r.Inspect(bg(t), "k"); err != nil || info.Kind != "" {
		t.Fatalf("Inspect with the key on 1 of 3 nodes: %+v, %v; want free", info, err)
	}
}
