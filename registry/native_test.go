package registry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// capsOf is redistest.CapsOf, failing the test on error.
func capsOf(t *testing.T, addr string) redistest.Caps {
	t.Helper()
	c, err := redistest.CapsOf(addr)
	mustNil(t, err)
	return c
}

// releaseCommands returns the commands of an uncontended release on b:
// DELEX or DELIFEQ, PUBLISH and EXISTS where the server has one (miniredis
// has DELEX), else the release script.
func releaseCommands(t *testing.T, b *backend) []string {
	if b.mr != nil {
		return []string{"DELEX", "PUBLISH", "EXISTS"}
	}
	caps := capsOf(t, b.addr)
	switch {
	case caps.Del:
		return []string{"DELEX", "PUBLISH", "EXISTS"}
	case caps.DelIf:
		return []string{"DELIFEQ", "PUBLISH", "EXISTS"}
	}
	return []string{"EVALSHA"}
}

// commandCalls is redistest.CommandCalls, failing the test on error.
func commandCalls(t *testing.T, addr string) map[string]int {
	t.Helper()
	c, err := redistest.CommandStats(addr)
	mustNil(t, err)
	return c
}

// On each server the registry renews with SET IFEQ and releases with
// DELEX or DELIFEQ where the server has them, and by script where it does
// not: counted by the server itself, on a server of the test's own. The
// native release still wakes a waiter of another registry, and a waiter
// still gets its turn.
func TestNativeCommands(t *testing.T) {
	s, pool := ownServer(t)
	caps := capsOf(t, s.Addr)
	t.Logf("server: %+v", caps)
	logs := &logRecorder{}
	r := newReg(t, pool, registry.WithExpireAfter(time.Second), registry.WithLogger(slog.New(logs)))
	l := obtain(t, r, "k")
	before := commandCalls(t, s.Addr)
	const cycles, renewals = 3, 2
	for range cycles {
		mustNil(t, l.LockContext(bg(t)))
		for range renewals {
			mustNil(t, r.RenewLock(bg(t), "k"))
		}
		mustNil(t, l.UnlockContext(bg(t)))
		if n, _ := redis.Int(redistest.Do(s.Addr, "EXISTS", l.Key())); n != 0 {
			t.Fatal("the key outlived its release")
		}
	}
	after := commandCalls(t, s.Addr)
	diff := func(cmd string) int { return after[cmd] - before[cmd] }

	// The scripts show by the commands they call: renew.lua's PEXPIRE,
	// release.lua's DEL (the obtains, SET NX, call neither).
	wantPexpire, wantDelete := 0, 0
	if !caps.SetIfEq {
		wantPexpire = cycles * renewals
	}
	native := caps.Del || caps.DelIf
	if !native {
		wantDelete = cycles
	}
	if diff("pexpire") != wantPexpire || diff("del") != wantDelete {
		t.Errorf("renew.lua ran %d times and release.lua %d, want %d and %d (SET IFEQ %v, native delete %v)",
			diff("pexpire"), diff("del"), wantPexpire, wantDelete, caps.SetIfEq, native)
	}
	wantDel, wantDelIfEq := 0, 0
	switch {
	case caps.Del:
		wantDel = cycles
	case caps.DelIf:
		wantDelIfEq = cycles
	}
	if diff("delex") != wantDel || diff("delifeq") != wantDelIfEq {
		t.Errorf("DELEX %d and DELIFEQ %d calls, want %d and %d", diff("delex"), diff("delifeq"), wantDel, wantDelIfEq)
	}
	if native && diff("publish") != cycles {
		t.Errorf("%d PUBLISH, want one per release (%d)", diff("publish"), cycles)
	}
	if got := diff("command|info") + diff("command|docs"); got != 2 {
		t.Errorf("%d COMMAND INFO and DOCS calls, want 2: one probe per registry", got)
	}
	if st := r.Stats(); st.NativeFallbacks != 0 || st.Renewals != cycles*renewals {
		t.Errorf("fallbacks %d, renewals %d; want 0 and %d", st.NativeFallbacks, st.Renewals, cycles*renewals)
	}
	if n := logs.count(slog.LevelInfo, "native"); n != 0 {
		t.Errorf("%d log records about native commands, want none: nothing was refused", n)
	}

	// A waiter of another registry, which polls only every 10s, is woken
	// by the native release's message; the holder's watchdog renews
	// natively meanwhile.
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second),
		registry.WithAutoRenew(), registry.WithExpireAfter(time.Second)}
	pfx := prefix(t)
	r1, r2 := newRegPrefix(t, pool, pfx, opts...), newRegPrefix(t, pool, pfx, opts...)
	l1, l2 := obtain(t, r1, "w"), obtain(t, r2, "w")
	mustNil(t, l1.LockContext(bg(t)))
	got := lockInBackground(t, l2)
	b := &backend{name: "own", addr: s.Addr}
	waitQueued(t, b, l1, 1)
	waitFor(t, 5*time.Second, "two renewals by the watchdog", func() bool { return r1.Stats().Renewals >= 2 })
	mustNil(t, l1.UnlockContext(bg(t)))
	mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the native release"))
	if st := r1.Stats(); st.NativeFallbacks != 0 || st.LostLocks != 0 {
		t.Errorf("holder: fallbacks %d, lost %d; want 0 and 0", st.NativeFallbacks, st.LostLocks)
	}

	// WithScriptsOnly sends none of them.
	before = commandCalls(t, s.Addr)
	r3 := newReg(t, pool, registry.WithScriptsOnly())
	l3 := obtain(t, r3, "s")
	mustNil(t, l3.LockContext(bg(t)))
	mustNil(t, r3.RenewLock(bg(t), "s"))
	mustNil(t, l3.UnlockContext(bg(t)))
	after = commandCalls(t, s.Addr)
	if diff("delex")+diff("delifeq")+diff("command|info") != 0 || diff("pexpire") != 1 || diff("del") != 1 {
		t.Errorf("WithScriptsOnly: DELEX %d, DELIFEQ %d, COMMAND INFO %d, renew.lua %d, release.lua %d; want 0, 0, 0, 1, 1",
			diff("delex"), diff("delifeq"), diff("command|info"), diff("pexpire"), diff("del"))
	}
}

// refusing is a Client whose server claims (COMMAND INFO, COMMAND DOCS)
// to have the native commands in has (nil: the server answers), and
// refuses those in refuse with the error reply refuse[cmd], without
// sending them; every other command goes to the server. It counts the
// commands it refused, and those it saw (refused or sent).
type refusing struct {
	registry.Client
	cmds          registry.CommandClient
	has           map[string]bool // DELEX, DELIFEQ, SET (IFEQ)
	refuse        map[string]string
	mu            sync.Mutex
	refused, seen map[string]int
}

func newRefusing(pool registry.Pool, has []string, refuse map[string]string) *refusing {
	c := registry.NewPoolClient(pool)
	r := &refusing{Client: c, cmds: c.(registry.CommandClient), refuse: refuse, refused: map[string]int{}, seen: map[string]int{}}
	if has != nil {
		r.has = map[string]bool{}
	}
	for _, h := range has {
		r.has[h] = true
	}
	return r
}

func (r *refusing) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return r.PipelineOn(ctx, "", cmds)
}

func (r *refusing) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	out := make([]registry.Result, len(cmds))
	var pass [][]any
	var at []int
	for i, cmd := range cmds {
		name := strings.ToUpper(cmd[0].(string))
		r.mu.Lock()
		r.seen[name]++
		r.mu.Unlock()
		switch {
		case name == "COMMAND" && r.has == nil:
			pass, at = append(pass, cmd), append(at, i)
		case name == "COMMAND" && cmd[1] == "INFO":
			out[i].Reply = []any{r.entry("DELEX"), r.entry("DELIFEQ")}
		case name == "COMMAND":
			docs := []any{"summary", "Sets the string value of a key"}
			if r.has["SET"] {
				docs = append(docs, "arguments", []any{[]any{"name", "ifeq-value", "token", "IFEQ"}})
			}
			out[i].Reply = []any{"set", docs}
		case r.refuse[name] != "":
			r.mu.Lock()
			r.refused[name]++
			r.mu.Unlock()
			out[i].Err = &registry.ReplyError{Err: redis.Error(r.refuse[name])}
		default:
			pass, at = append(pass, cmd), append(at, i)
		}
	}
	if len(pass) > 0 {
		for k, res := range r.cmds.PipelineOn(ctx, key, pass) {
			out[at[k]] = res
		}
	}
	return out
}

// entry is the COMMAND INFO entry of cmd: nil unless the server has it.
func (r *refusing) entry(cmd string) any {
	if !r.has[cmd] {
		return nil
	}
	return []any{strings.ToLower(cmd), int64(-2)}
}

func (r *refusing) count(cmd string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[cmd]
}

func (r *refusing) sent(cmd string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[cmd] - r.refused[cmd]
}

// A native command that the server refuses (an unknown command, an
// unknown option, NOPERM) is dropped after its first refusal, and the
// script does its work: locks stay correct, the waiter is woken, renewals
// renew, Stats counts the one fallback, and one info record says so.
func TestNativeFallbacks(t *testing.T) {
	cases := []struct {
		name   string
		has    []string
		refuse map[string]string
		want   string // the refused command
	}{
		{"unknown command", []string{"DELEX"}, map[string]string{"DELEX": "ERR unknown command 'DELEX', with args beginning with: 'k'"}, "DELEX"},
		{"unknown command, then the other", []string{"DELEX", "DELIFEQ"}, map[string]string{
			"DELEX": "ERR unknown command 'DELEX'", "DELIFEQ": "ERR unknown command 'DELIFEQ'"}, "DELIFEQ"},
		{"unknown option", []string{"SET"}, map[string]string{"SET": "ERR syntax error"}, "SET"},
		{"NOPERM", []string{"DELEX"}, map[string]string{"DELEX": "NOPERM User u has no permissions to run the 'delex' command"}, "DELEX"},
	}
	forBackends(t, func(t *testing.T, b *backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				rc := newRefusing(b.pool(t), tc.has, tc.refuse)
				logs := &logRecorder{}
				pfx := prefix(t)
				opts := []registry.Option{registry.WithExpireAfter(2 * time.Second), registry.WithLockType(registry.PubSubLock),
					registry.WithIdleBetweenTries(10 * time.Second)}
				// Each release after the waiter's is quiet (native), not one
				// that still expects waiters.
				r := newRegClientPrefix(t, rc, pfx, append(opts, registry.WithLogger(slog.New(logs)), registry.WithCrowdMemory(0))...)
				other := newRegPrefix(t, b.pool(t), pfx, append(opts, registry.WithScriptsOnly())...)
				l, w := obtain(t, r, "k"), obtain(t, other, "k")
				for i := range 3 {
					mustNil(t, l.LockContext(bg(t)))
					if i == 0 { // a waiter, woken by the release's message
						got := lockInBackground(t, w)
						waitQueued(t, b, l, 1)
						ttl := func() int64 { n, _ := redis.Int64(b.do(t, "PTTL", l.Key()), nil); return n }
						if b.mr != nil {
							b.mr.FastForward(time.Second)
						} else {
							waitFor(t, 3*time.Second, "the TTL to run down", func() bool { return ttl() < 1900 })
						}
						mustNil(t, r.RenewLock(bg(t), "k"))
						if got := ttl(); got < 1900 {
							t.Fatalf("RenewLock left a TTL of %dms, want about 2000", got)
						}
						mustNil(t, l.UnlockContext(bg(t)))
						mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the release"))
						continue
					}
					mustNil(t, r.RenewLock(bg(t), "k"))
					mustNil(t, l.UnlockContext(bg(t)))
					if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
						t.Fatal("the key outlived its release")
					}
				}
				for cmd := range tc.refuse {
					if n := rc.count(cmd); n > 1 {
						t.Errorf("%s was refused %d times: it is to be dropped after the first", cmd, n)
					}
				}
				if rc.count(tc.want) != 1 {
					t.Errorf("%s refused %d times, want once", tc.want, rc.count(tc.want))
				}
				st := r.Stats()
				if want := uint64(len(tc.refuse)); st.NativeFallbacks != want || st.LostLocks != 0 || st.Renewals != 3 {
					t.Errorf("fallbacks %d, lost %d, renewals %d; want %d, 0, 3", st.NativeFallbacks, st.LostLocks, st.Renewals, want)
				}
				if n := logs.count(slog.LevelInfo, "refused a native command"); n != 1 {
					t.Errorf("%d info records of a refusal, want 1", n)
				}
			})
		}
	})
}

// On miniredis, which has DELEX but not SET IFEQ and answers COMMAND with
// a table of its own, the registry tries both: DELEX serves the releases,
// and the first renewal falls back to the script for good.
func TestNativeMiniredis(t *testing.T) {
	mr := miniredis.RunT(t)
	pool := redistest.NewPool(mr.Addr())
	t.Cleanup(func() { pool.Close() })
	rc := newRefusing(pool, nil, nil)
	r := newRegClient(t, rc, registry.WithLogger(discardLogger))
	l := obtain(t, r, "k")
	for range 3 {
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, r.RenewLock(bg(t), "k"))
		mustNil(t, l.UnlockContext(bg(t)))
		if mr.Exists(l.Key()) {
			t.Fatal("the key outlived its release")
		}
	}
	if st := r.Stats(); st.NativeFallbacks != 1 || st.Renewals != 3 {
		t.Errorf("fallbacks %d, renewals %d; want 1 (the first SET IFEQ) and 3", st.NativeFallbacks, st.Renewals)
	}
	if rc.sent("DELEX") != 3 || rc.sent("SET") != 1 || rc.sent("DELIFEQ") != 0 {
		t.Errorf("sent DELEX %d, SET IFEQ %d, DELIFEQ %d times; want 3, 1 and 0", rc.sent("DELEX"), rc.sent("SET"), rc.sent("DELIFEQ"))
	}
}

// serverMs returns the server's clock in ms.
func serverMs(t *testing.T, addr string) int64 {
	v, err := redis.Int64s(redistest.Do(addr, "TIME"))
	mustNil(t, err)
	return v[0]*1000 + v[1]/1000
}

// Registries that take turns on a key send about one release message per
// acquisition, whatever the server: the native release, which gives no
// turn, serves only a lock that expects no waiter, so that the first in
// line takes the key with its turn, unannounced; after a native release
// each take would be announced too, and every listener behind would wake a
// turn early (two messages and twice the obtains per acquisition).
func TestNativeReleaseKeepsTurns(t *testing.T) {
	s, pool := ownServer(t)
	pfx := prefix(t)
	const n, rounds = 6, 25
	var locks []*registry.RedisLock
	for range n {
		r := newRegPrefix(t, pool, pfx, registry.WithLockType(registry.PubSubLock))
		locks = append(locks, obtain(t, r, "k"))
	}
	before := commandCalls(t, s.Addr)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, l := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := l.LockContext(bg(t)); err != nil {
					errs <- err
					return
				}
				time.Sleep(500 * time.Microsecond) // the critical section
				if err := l.UnlockContext(bg(t)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		mustNil(t, err)
	}
	after := commandCalls(t, s.Addr)
	per := func(cmd string) float64 { return float64(after[cmd]-before[cmd]) / (n * rounds) }
	t.Logf("per acquisition: PUBLISH %.2f, EVALSHA %.2f, DELEX %.2f, DELIFEQ %.2f", per("publish"), per("evalsha"), per("delex"), per("delifeq"))
	if per("publish") > 1.3 {
		t.Fatalf("%.2f release messages per acquisition, want about one", per("publish"))
	}
}

// A listener that died while queued is ahead of a live one: the release
// drops its entry and announces it, so the live listener, which polls only
// every 2s, takes the key at once, after a native release too (nudge.lua
// follows one that found waiters).
func TestNativeDeadListenerAhead(t *testing.T) {
	s, pool := ownServer(t)
	b := &backend{name: "own", addr: s.Addr}
	pfx := prefix(t)
	h := obtain(t, newRegPrefix(t, pool, pfx), "k")
	w := obtain(t, newRegPrefix(t, pool, pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(2*time.Second)), "k")
	mustNil(t, h.LockContext(bg(t))) // uncontended: its release may be native
	lay := wire.Layout{Registry: pfx}
	now := serverMs(t, s.Addr)
	lapse := now + 300
	b.do(t, "ZADD", lay.QueueKey(h.Key()), strconv.FormatInt(now-1000, 10), "dead/1")
	b.do(t, "HSET", lay.WaitersKey(h.Key()), "dead/1", fmt.Sprintf("l %d %d", now+100, lapse))
	got := make(chan time.Time, 1)
	go func() {
		if w.LockContext(bg(t)) == nil {
			got <- time.Now()
			_ = w.UnlockContext(context.Background())
		}
		close(got)
	}()
	waitQueued(t, b, h, 2)
	waitFor(t, 5*time.Second, "the dead entry to lapse", func() bool { return serverMs(t, s.Addr) > lapse })
	released := time.Now()
	mustNil(t, h.UnlockContext(bg(t)))
	at, ok := <-got
	if !ok {
		t.Fatal("the live listener did not get the lock")
	}
	<-got
	if d := at.Sub(released); d > time.Second {
		t.Fatalf("the live listener took the key %v after the release, want at once (it polls every 2s)", d)
	}
}

// dropsCommand is a Client whose COMMAND fails on the network, as behind a
// proxy that closes the connection on a command it does not know.
type dropsCommand struct {
	registry.Client
	cmds   registry.CommandClient
	mu     sync.Mutex
	probes int
}

func (d *dropsCommand) Pipeline(ctx context.Context, cmds [][]any) []registry.Result {
	return d.cmds.Pipeline(ctx, cmds)
}

func (d *dropsCommand) PipelineOn(ctx context.Context, key string, cmds [][]any) []registry.Result {
	if cmds[0][0] == "COMMAND" {
		d.mu.Lock()
		d.probes++
		d.mu.Unlock()
		out := make([]registry.Result, len(cmds))
		for i := range out {
			out[i].Err = io.ErrUnexpectedEOF
		}
		return out
	}
	return d.cmds.PipelineOn(ctx, key, cmds)
}

// A probe that fails on the network is tried again a few times, not at
// every call; the locks work meanwhile, and after it.
func TestNativeProbeBounded(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		c := registry.NewPoolClient(b.pool(t))
		d := &dropsCommand{Client: c, cmds: c.(registry.CommandClient)}
		r := newRegClient(t, d, registry.WithLogger(discardLogger))
		l := obtain(t, r, "k")
		for range 10 {
			mustNil(t, l.LockContext(bg(t)))
			mustNil(t, r.RenewLock(bg(t), "k"))
			mustNil(t, l.UnlockContext(bg(t)))
		}
		if d.probes != 3 {
			t.Fatalf("%d probes for 20 renewals and releases, want 3", d.probes)
		}
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("the key outlived its release")
		}
	})
}

// A waiter that stays queued (a poller not due for a minute, which
// obtain.lua passes over and lets a caller take the free key before it)
// keeps the lock's releases on release.lua after the first finds it: an
// acquisition at the first attempt does not make the lock expect the key
// free of waiters again.
func TestNativeReleaseOffWhileQueued(t *testing.T) {
	s, pool := ownServer(t)
	b := &backend{name: "own", addr: s.Addr}
	pfx := prefix(t)
	l := obtain(t, newRegPrefix(t, pool, pfx), "k")
	lay := wire.Layout{Registry: pfx}
	now := serverMs(t, s.Addr)
	b.do(t, "ZADD", lay.QueueKey(l.Key()), strconv.FormatInt(now, 10), "poller/1")
	b.do(t, "ZADD", lay.PollsKey(l.Key()), strconv.FormatInt(now, 10), "poller/1")
	b.do(t, "HSET", lay.WaitersKey(l.Key()), "poller/1", fmt.Sprintf("p %d %d", now+60000, now+120000))
	before := commandCalls(t, s.Addr)
	for range 10 {
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
	}
	after := commandCalls(t, s.Addr)
	native := after["delex"] - before["delex"] + after["delifeq"] - before["delifeq"]
	if native > 1 {
		t.Fatalf("%d of 10 releases were native with a waiter queued, want at most the first", native)
	}
}
