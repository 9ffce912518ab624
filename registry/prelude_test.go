package registry_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// entry is one waiter of a queue as a test sets it up: its id, when it
// began to wait, and its info as the scripts write it ('KIND DUE LAPSE'),
// or "" for none.
type entry struct {
	id    string
	since int
	info  string
}

// ruleKeys returns the queue keys of a rules test: order, info, turn,
// pollers.
func ruleKeys(name string) []string {
	return []string{"{" + name + "}:queue", "{" + name + "}:waiters", "{" + name + "}:turn", "{" + name + "}:polls"}
}

// setQueue writes the queue keys of a rules test.
func setQueue(t *testing.T, b *backend, keys []string, es []entry) {
	t.Helper()
	for _, e := range es {
		b.do(t, "ZADD", keys[0], e.since, e.id)
		if e.info != "" {
			b.do(t, "HSET", keys[1], e.id, e.info)
		}
	}
}

// The turn rule (lua/prelude.lua, nextTurn), table-driven with a fixed
// clock, on both tiers: the first live waiter that is sure to try soon gets
// the turn, a listener for the window, a poller due within ahead (and
// within a third of its poll interval, or slack plus a ms) until it is
// due (plus slack), and
// its entry says when the turn ends; a poller due later keeps its place; lapsed, unreadable and described-less entries,
// and those whose last turn ended more than a window ago, are dropped on
// the way (at most 64 per call); at most 4 live entries are looked at; a
// queue key of another type is reset.
func TestTurnRule(t *testing.T) {
	const now, window, ahead, slack = 1_000_000, 5, 20, 2
	many := func(n int, info string) []entry {
		var es []entry
		for i := range n {
			es = append(es, entry{fmt.Sprintf("x%02d", i), i, info})
		}
		return es
	}
	cases := []struct {
		name  string
		queue []entry
		want  string // the grantee, "" for none
		ms    int64
		left  []string // the queue afterwards
		self  string   // the waiter that runs the script, if any
		moved int64    // listeners dropped
	}{
		{name: "empty"},
		{"listener", []entry{{"a", 1, "l 1000050 1000200"}, {"b", 2, "l 1000050 1000200"}}, "a", window, []string{"a", "b"}, "", 0},
		{"lapsed listener dropped", []entry{{"a", 1, "l 999000 1000000"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"b"}, "", 1},
		{"poller due soon", []entry{{"p", 1, "p 1000015 1000200"}, {"b", 2, "l 1000050 1000200"}}, "p", 15 + slack, []string{"p", "b"}, "", 0},
		{"poller due later passed over", []entry{{"p", 1, "p 1000500 1001000"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"p", "b"}, "", 0},
		{"30ms poller due within a third of its interval", []entry{{"p", 1, "p 1000009 1000039"}, {"b", 2, "l 1000050 1000200"}}, "p", 9 + slack, []string{"p", "b"}, "", 0},
		{"30ms poller due past a third of its interval passed over", []entry{{"p", 1, "p 1000012 1000042"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"p", "b"}, "", 0},
		{"10ms poller due past a third of its interval passed over", []entry{{"p", 1, "p 1000004 1000014"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"p", "b"}, "", 0},
		{"1ms poller due after its interval and a round trip", []entry{{"p", 1, "p 1000002 1000003"}, {"b", 2, "l 1000050 1000200"}}, "p", 2 + slack, []string{"p", "b"}, "", 0},
		{"1ms poller due later passed over", []entry{{"p", 1, "p 1000004 1000005"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"p", "b"}, "", 0},
		{"overdue poller", []entry{{"p", 1, "p 999990 1000100"}}, "p", slack, []string{"p"}, "", 0},
		{"only pollers due later", []entry{{"p", 1, "p 1000500 1001000"}, {"q", 2, "p 1000900 1002000"}}, "", 0, []string{"p", "q"}, "", 0},
		{"missed turn dropped", []entry{{"a", 1, "l 1000050 1000200 999990"}, {"b", 2, "l 1000050 1000200"}}, "b", window, []string{"b"}, "", 1},
		{"the caller is never dropped", []entry{{"a", 1, "p 999000 999500 999990"}, {"b", 2, "l 1000050 1000200"}}, "a", 0, []string{"a", "b"}, "a", 0},
		{"turn just ended kept", []entry{{"a", 1, "l 1000050 1000200 999998"}, {"b", 2, "l 1000050 1000200"}}, "a", window, []string{"a", "b"}, "", 0},
		{"unreadable and bare entries dropped", []entry{{"g", 1, "garbage"}, {"n", 2, ""}, {"b", 3, "l 1000050 1000200"}}, "b", window, []string{"b"}, "", 2},
		{"four live entries at most", append(many(4, "p 1000500 1001000"), entry{"b", 9, "l 1000050 1000200"}), "", 0,
			[]string{"x00", "x01", "x02", "x03", "b"}, "", 0},
		{"64 drops at most", append(many(70, "l 1 2"), entry{"z", 99, "l 1000050 1000200"}), "", 0,
			[]string{"x64", "x65", "x66", "x67", "x68", "x69", "z"}, "", 64},
		{"64 drops at most, within a batch", append(append([]entry{{"p", -1, "p 1000500 1001000"}}, many(66, "l 1 2")...), entry{"z", 99, "l 1000050 1000200"}), "", 0,
			[]string{"p", "x64", "x65", "z"}, "", 64},
	}
	forBackends(t, func(t *testing.T, b *backend) {
		c := registry.NewPoolClient(b.pool(t))
		for i, tc := range cases {
			pfx := prefix(t)
			keys := ruleKeys(fmt.Sprint(pfx, i))
			setQueue(t, b, keys, tc.queue)
			v, err := registry.RunRule(bg(t), c, keys, "nextTurn", now, window, ahead, slack, tc.self)
			mustNil(t, err)
			r := v.([]any)
			id, _ := redis.String(r[0], nil)
			left, _ := redis.Strings(r[2], nil)
			if id != tc.want || r[1].(int64) != tc.ms || !slices.Equal(left, tc.left) && len(left)+len(tc.left) > 0 || r[3].(int64) != tc.moved {
				t.Errorf("%s: turn %q for %d ms, queue %v, %d listeners dropped; want %q for %d ms, queue %v, %d dropped",
					tc.name, id, r[1], left, r[3], tc.want, tc.ms, tc.left, tc.moved)
			}
			if info, _ := redis.String(b.do(t, "HGET", keys[1], id), nil); id != "" && id != tc.self && !strings.HasSuffix(info, " "+fmt.Sprint(now+tc.ms)) &&
				!strings.HasSuffix(info, " 999998") {
				t.Errorf("%s: the grantee's info %q does not say when its turn ends (%d)", tc.name, info, now+tc.ms)
			}
		}

		// A queue key of another type is reset: nobody is in line.
		pfx := prefix(t)
		keys := ruleKeys(pfx)
		b.do(t, "SET", keys[0], "not a sorted set")
		v, err := registry.RunRule(bg(t), c, keys, "nextTurn", now, window, ahead, slack, "")
		mustNil(t, err)
		if id, _ := redis.String(v.([]any)[0], nil); id != "" || b.do(t, "EXISTS", keys[0]).(int64) != 0 {
			t.Errorf("a queue of another type: turn %q, key still there", id)
		}
	})
}

// How long a waiter sleeps (lua/prelude.lua, pause), table-driven: a
// waiter at most second in line to a running turn, until the turn ends;
// else until the holder's key expires if that is sooner than its poll
// interval; else the poll interval less the jitter, at least 1ms.
func TestPauseRule(t *testing.T) {
	cases := []struct {
		pttl, rank, turnLeft, idle, spread, want int64
	}{
		{pttl: -2, rank: 0, turnLeft: 4, idle: 100, spread: 10, want: 5},
		{pttl: -2, rank: 1, turnLeft: 4, idle: 100, spread: 10, want: 5},
		{pttl: -2, rank: 2, turnLeft: 4, idle: 100, spread: 10, want: 90},
		{pttl: 30, rank: 0, turnLeft: -1, idle: 100, spread: 10, want: 31},
		{pttl: 300, rank: 0, turnLeft: -1, idle: 100, spread: 10, want: 90},
		{pttl: -1, rank: 5, turnLeft: -1, idle: 100, spread: 25, want: 75},
		{pttl: -1, rank: 0, turnLeft: -1, idle: 1, spread: 1, want: 1},
	}
	forBackends(t, func(t *testing.T, b *backend) {
		c := registry.NewPoolClient(b.pool(t))
		keys := ruleKeys("x")
		for _, tc := range cases {
			v, err := registry.RunRule(bg(t), c, keys, "pause", tc.pttl, tc.rank, tc.turnLeft, tc.idle, tc.spread)
			mustNil(t, err)
			if v.(int64) != tc.want {
				t.Errorf("pause%+v = %d", tc, v)
			}
		}
	})
}

// Joining the queue (enqueue, describe): a waiter keeps its place when it
// tries again; a listener counts the listeners ahead of it, not the
// pollers; the queue keys live at least until the newest entry lapses. The
// same whether the caller expects to be new in line (enqueue adds first)
// or not (it reads its place first): a waiter in line after all keeps its
// place and its own start, against which the pollers ahead are counted. A
// queue info key of another type (a hand-written value) is replaced: the
// first entry is described all the same, not left in line without its
// info (which the next walk would drop).
func TestJoinRule(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, hint := range []string{"0", "1"} {
			t.Run("new="+hint, func(t *testing.T) {
				c := registry.NewPoolClient(b.pool(t))
				pfx := prefix(t)
				keys := ruleKeys(pfx)
				b.do(t, "SET", keys[1], "junk")
				join := func(id, kind string, now, lapse int) (ahead, pttl int64, added bool) {
					v, err := registry.RunRule(bg(t), c, keys, "join", id, now, kind, now+10, lapse, hint)
					mustNil(t, err)
					r := v.([]any)
					return r[0].(int64), r[1].(int64), r[2].(int64) == 1
				}
				if ahead, pttl, added := join("a", "l", 1000, 1300); ahead != 0 || pttl < 590 || pttl > 600 || !added {
					t.Fatalf("first join: %d ahead, PTTL %d, added %v; want 0, twice the 300ms to its lapse, true", ahead, pttl, added)
				}
				if v, _ := redis.String(b.do(t, "HGET", keys[1], "a"), nil); v != "l 1010 1300" {
					t.Fatalf("a's info %q after the first join, want it written over the value of another type", v)
				}
				if ahead, _, _ := join("p", "p", 1005, 1300); ahead != 1 {
					t.Fatalf("a poller behind a listener: %d ahead, want 1", ahead)
				}
				if ahead, _, _ := join("b", "l", 1010, 1300); ahead != 1 {
					t.Fatalf("a listener behind a listener and a poller: %d ahead, want 1 (pollers do not count)", ahead)
				}
				if ahead, _, added := join("a", "l", 1020, 1400); ahead != 0 || added {
					t.Fatalf("the first waiter trying again: %d ahead, added %v; want its place (0), not added", ahead, added)
				}
				if v, _ := redis.String(b.do(t, "HGET", keys[1], "a"), nil); v != "l 1030 1400" {
					t.Fatalf("a's info %q", v)
				}
				// A poller behind b: b, trying again, counts only the poller
				// that came before it (its own start, not now).
				join("p2", "p", 1015, 1300)
				if ahead, _, added := join("b", "l", 1030, 1400); ahead != 1 || added {
					t.Fatalf("b trying again behind a poller and before another: %d ahead, added %v; want 1, not added", ahead, added)
				}
				if ahead, _, added := join("p", "p", 1040, 1400); ahead != 1 || added {
					t.Fatalf("a poller trying again: %d ahead, added %v; want its place (1), not added", ahead, added)
				}
				if s, _ := redis.Float64(b.do(t, "ZSCORE", keys[3], "p"), nil); s != 1005 {
					t.Fatalf("the poller's start among the pollers is %v, want 1005 (when it came)", s)
				}
				if ps, _ := redis.Strings(b.do(t, "ZRANGE", keys[3], 0, -1), nil); !slices.Equal(ps, []string{"p", "p2"}) {
					t.Fatalf("pollers %v", ps)
				}
				if ids, _ := redis.Strings(b.do(t, "ZRANGE", keys[0], 0, -1), nil); !slices.Equal(ids, []string{"a", "p", "b", "p2"}) {
					t.Fatalf("line %v, want each in the place where it came", ids)
				}
				for _, k := range keys[:4] {
					if k == keys[2] {
						continue // no turn was given
					}
					if p, _ := redis.Int64(b.do(t, "PTTL", k), nil); p <= 0 {
						t.Fatalf("%s has PTTL %d: a queue key without a time to live", k, p)
					}
				}
			})
		}
	})
}

// ruleKeysWithSem returns the keys of a semaphore rules test: the queue's
// (ruleKeys), the semaphore key and its fence counter.
func ruleKeysWithSem(name string) []string {
	return append(ruleKeys(name), "{"+name+"}:sem", "{"+name+"}:fence")
}

// The semaphore's admission rule (lua/prelude.lua, permitRules.admit),
// table-driven with a fixed clock, on both tiers, as the turn rule is: the
// first waiters in line that are sure to try soon take the free permits,
// each listener among them told once; a caller is admitted while fewer of
// them are ahead than permits are free; a poller due later is passed over
// and keeps its place; lapsed, unreadable and missed-turn entries are
// dropped (at most 64); past 64 live entries the free permits are
// anyone's, so that a listener behind many pollers not yet due is not
// refused while a permit idles.
func TestAdmitRule(t *testing.T) {
	const now, window, ahead, slack = 1_000_000, 5, 20, 2
	const listen, later, soon = "l 1000050 1000200", "p 1003000 1006000", "p 1000010 1006000"
	many := func(n int, info string) []entry {
		var es []entry
		for i := range n {
			es = append(es, entry{fmt.Sprintf("x%02d", i), i, info})
		}
		return es
	}
	ids := func(es []entry) []string {
		var s []string
		for _, e := range es {
			s = append(s, e.id)
		}
		return s
	}
	cases := []struct {
		name  string
		queue []entry
		free  int
		self  string // "" for a caller not in line (offer)
		ok    bool
		told  []string
		left  []string // the queue afterwards (nil: as set up)
		// again: the free permits of a second admit in the same run (0:
		// none), and the listeners it tells.
		again     int
		toldAgain []string
	}{
		{name: "empty queue", free: 1, ok: true},
		{name: "no permit free", queue: []entry{{"s", 1, listen}}, free: 0, self: "s"},
		{name: "a listener ahead takes the one permit", queue: []entry{{"a", 1, listen}, {"s", 2, listen}}, free: 1, self: "s", told: []string{"a"}},
		{name: "two free: the listener ahead and the caller", queue: []entry{{"a", 1, listen}, {"s", 2, listen}}, free: 2, self: "s", ok: true},
		{name: "the caller first in line", queue: []entry{{"s", 1, listen}, {"a", 2, listen}}, free: 1, self: "s", ok: true},
		{name: "a poller due later is passed over", queue: []entry{{"p", 1, later}, {"s", 2, listen}}, free: 1, self: "s", ok: true},
		{name: "a poller due soon takes it, untold", queue: []entry{{"p", 1, soon}, {"s", 2, listen}}, free: 1, self: "s"},
		{name: "offer tells the first listeners", queue: []entry{{"p", 1, later}, {"a", 2, listen}, {"b", 3, listen}, {"c", 4, listen}}, free: 2, ok: false, told: []string{"a", "b"}},
		{name: "a listener told once", queue: []entry{{"a", 1, listen + " 999999"}, {"s", 2, listen}}, free: 1, self: "s"},
		{name: "lapsed and unreadable dropped", queue: []entry{{"x", 1, "l 1 2"}, {"g", 2, "garbage"}, {"n", 3, ""}, {"s", 4, listen}}, free: 1, self: "s", ok: true, left: []string{"s"}},
		{name: "missed turn dropped", queue: []entry{{"a", 1, listen + " 999990"}, {"s", 2, listen}}, free: 1, self: "s", ok: true, left: []string{"s"}},
		{name: "a listener behind 20 pollers due later", queue: append(many(20, later), entry{"s", 99, listen}), free: 1, self: "s", ok: true},
		{name: "offer reaches a listener behind 20 pollers", queue: append(many(20, later), entry{"a", 99, listen}), free: 1, told: []string{"a"}},
		{name: "past 64 live entries the permit is anyone's", queue: append(many(70, later), entry{"s", 99, listen}), free: 1, self: "s", ok: true},
		{name: "64 drops at most", queue: append(many(70, "l 1 2"), entry{"a", 99, listen}), free: 1, ok: true,
			left: []string{"x64", "x65", "x66", "x67", "x68", "x69", "a"}},
		// A second admit before the first's listeners are told (offer after
		// the caller's, semacquire.lua): those count ahead, untold again.
		{name: "a second admit tells the next listener", queue: []entry{{"a", 1, listen}, {"b", 2, listen}, {"c", 3, listen}}, free: 1, again: 2,
			told: []string{"a"}, toldAgain: []string{"b"}},
	}
	forBackends(t, func(t *testing.T, b *backend) {
		c := registry.NewPoolClient(b.pool(t))
		for i, tc := range cases {
			keys := ruleKeysWithSem(fmt.Sprint(prefix(t), i))
			setQueue(t, b, keys, tc.queue)
			args := []any{"admit", now, tc.free, tc.self, window, ahead, slack}
			if tc.again > 0 {
				args = append(args, tc.again)
			}
			v, err := registry.RunRule(bg(t), c, keys, args...)
			mustNil(t, err)
			r := v.([]any)
			told, _ := redis.Strings(r[1], nil)
			left, _ := redis.Strings(r[2], nil)
			again, _ := redis.Strings(r[3], nil)
			want := tc.left
			if want == nil {
				want = ids(tc.queue)
			}
			if ok := r[0].(int64) == 1; ok != tc.ok || !slices.Equal(told, tc.told) || !slices.Equal(left, want) || !slices.Equal(again, tc.toldAgain) {
				t.Errorf("%s: admitted %v, told %v then %v, queue %v; want %v, %v then %v, %v", tc.name, ok, told, again, left, tc.ok, tc.told, tc.toldAgain, want)
			}
			for _, id := range append(told, again...) {
				if info, _ := redis.String(b.do(t, "HGET", keys[1], id), nil); !strings.HasSuffix(info, fmt.Sprint(" ", now+window)) {
					t.Errorf("%s: %s was told, but its info %q does not say its turn ends at %d", tc.name, id, info, now+window)
				}
			}
		}
	})
}

// The semaphore's permit rules on the server clock (permitRules: hold,
// live, soonest): a permit expires ttl after now, the key lives at least
// as long, expired permits do not count as live (soonest reads the first,
// unpruned: 0), and a fenced hold takes
// a larger token each time from a counter that has a time to live.
func TestPermitRules(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		c := registry.NewPoolClient(b.pool(t))
		keys := ruleKeysWithSem(prefix(t))
		run := func(args ...any) []any {
			t.Helper()
			v, err := registry.RunRule(bg(t), c, keys, args...)
			mustNil(t, err)
			return v.([]any)
		}
		if r := run("live", 1000); r[0].(int64) != 0 || r[1].(int64) != -2 {
			t.Fatalf("no permits: live %d, soonest %d; want 0, -2", r[0], r[1])
		}
		r := run("hold", "a", 1000, 5000, 0)
		if exp, _ := redis.Int64(r[2], nil); r[0].(int64) != 0 || exp != 6000 || r[1].(int64) < 4900 || r[1].(int64) > 5000 {
			t.Fatalf("hold a: fence %d, PTTL %d, expiry %d; want 0, about 5000, 6000", r[0], r[1], exp)
		}
		first := run("hold", "b", 2000, 1000, 1)[0].(int64)
		second := run("hold", "c", 2000, 1000, 1)[0].(int64)
		if first <= 0 || second <= first {
			t.Fatalf("fencing tokens %d then %d, want increasing", first, second)
		}
		if ms, _ := redis.Int64(b.do(t, "PTTL", keys[5]), nil); ms <= 0 {
			t.Fatalf("fence counter PTTL %d, want a time to live", ms)
		}
		for _, tc := range []struct{ now, live, soonest int64 }{{1500, 3, 1500}, {2999, 3, 1}, {3000, 1, 0}, {6000, 0, 0}} {
			if r := run("live", tc.now); r[0].(int64) != tc.live || r[1].(int64) != tc.soonest {
				t.Errorf("at %d: live %d, soonest %d; want %d, %d", tc.now, r[0], r[1], tc.live, tc.soonest)
			}
		}
	})
}
