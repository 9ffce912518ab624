package registry_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// The lean paths of semacquire.lua (a waiter refused by a full semaphore;
// a waiter in line refused while the free permits are the turns of those
// ahead of it, op "wait"), semrelease.lua (a release that gives one free
// permit's turn to the first in line), obtain.lua (a waiter refused by a
// held lock) and release.lua (a release that gives the key's turn to the
// first in line) are the general rules written out for one case each. On
// random states of a semaphore and its queue, both tiers, each script runs
// twice from the same state, with its lean path and with that path
// skipped, at a fixed clock (with a fraction of a ms in half the states, a
// whole ms in the others, so that a field may equal it): the replies,
// every key's contents and time to live, and the messages published must
// be the same: exactly on miniredis, where time stands still; on the real
// server with the slack of time passing (leanRun.same).
// The states are drawn so that both the lean paths and the cases they
// leave to the general path are common: of the runs that reach a lean
// path, at least a tenth must have been answered by it, and a tenth not.
func TestLeanPathsMatchTheRules(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx, pool := prefix(t), b.pool(t)
		c, conn := registry.NewPoolClient(pool), pool.Get()
		defer conn.Close()
		do := func(cmd string, args ...any) any {
			t.Helper()
			v, err := conn.Do(cmd, args...)
			if err != nil {
				t.Fatalf("%s %v: %v", cmd, args, err)
			}
			return v
		}
		rng := rand.New(rand.NewPCG(40, uint64(len(b.name))))
		for _, op := range []string{"acquire", "wait", "release", "obtain", "unlock"} {
			leaned, reached, runs := 0, 0, 400
			for i := range runs {
				var st *leanState
				if op == "obtain" || op == "unlock" {
					st = drawLockState(rng, pfx, op, b.mr != nil)
				} else {
					st = drawLeanState(rng, pfx, op)
				}
				whole := i%2 == 1
				var got [2]leanRun
				var fell [2]bool
				// A difference is run again once: on the real server a key that
				// a script gave a few ms to live may expire in one run alone,
				// if the machine stalls while the test reads the keys.
				for try := 0; try < 2 && (try == 0 || !got[0].same(got[1], b.mr != nil)); try++ {
					for j, lean := range []bool{false, true} {
						st.write(do)
						v, err := registry.RunLean(bg(t), c, op, lean, whole, st.keys, st.args...)
						fell[j] = do("GET", "lean:fell") != nil
						got[j] = leanRun{reply: fmt.Sprintf("%v, error %v", fmtReply(v), err), keys: st.read(do)}
					}
				}
				if fell[0] {
					reached++
					if !fell[1] {
						leaned++
					}
				}
				if !got[0].same(got[1], b.mr != nil) {
					t.Fatalf("%s, state %d (whole clock %v):\n%s\nargs %v\ngeneral path:\n%s\nlean path:\n%s", op, i, whole, st.desc, st.args, got[0], got[1])
				}
			}
			t.Logf("%s: %d of %d runs reached the lean path, %d answered by it", op, reached, runs, leaned)
			if leaned < reached/10 || leaned > reached*9/10 {
				t.Errorf("%s: the lean path answered %d of the %d runs that reached it; the states do not cover both paths", op, leaned, reached)
			}
		}
	})
}

// leanState is a semaphore, its queue and a script's call, as
// TestLeanPathsMatchTheRules draws them.
type leanState struct {
	keys []string // semaphore, queue order, info, turn, pollers, fence
	args []any
	cmds [][]any // the commands that write the state
	desc string
}

// drawLeanState draws a state in which op ("acquire", "wait" or "release")
// runs: "wait" is semacquire.lua's, drawn for its second lean path (a
// waiter in line refused while permits are free: more of them are free,
// the caller is more often in line, and more entries have their turns).
func drawLeanState(rng *rand.Rand, pfx, op string) *leanState {
	st, do, pick := newLeanState(rng, pfx, "sem")
	now, regs := leanNow, leanRegs
	permits := 1 + rng.IntN(4)
	wait := op == "wait"
	if op != "release" && rng.IntN(20) == 0 {
		permits = 0 // refused by Registry.Semaphore; the scripts must still agree
	}
	count := func() string {
		if rng.IntN(8) == 0 {
			return pick("", "#9")
		}
		return fmt.Sprint("#", permits)
	}
	// The permits: live, expired, of this count or another.
	var held []string
	full := rng.IntN(2) == 0 // every permit taken and live: an attempt most often refused, a release that frees one
	n := rng.IntN(permits + 2)
	if wait {
		full, n = rng.IntN(10) == 0, max(0, permits-1-rng.IntN(2)*rng.IntN(3)) // one permit free, most often
	}
	if full {
		n = permits
	}
	for i := range n {
		tok := fmt.Sprintf("%s:g%d%s", regs[rng.IntN(5)], i, count())
		exp := now + 1 + rng.Int64N(3000)
		if !full && rng.IntN(5) == 0 {
			exp = now - rng.Int64N(100)
			if wait && rng.IntN(3) == 0 {
				exp = now // expired in this ms: pruned
			}
		}
		do("ZADD", st.keys[0], exp, tok)
		held = append(held, tok)
	}
	// The queue: listeners and pollers, live, lapsed, given a turn, with
	// and without grant records, unreadable.
	inLine := map[string]bool{}
	queued := rng.IntN(5)
	if full && op == "release" {
		queued = 1 + rng.IntN(4)
	} else if wait {
		queued = 2 + rng.IntN(3)
	}
	last, tidy := "", wait && rng.IntN(3) == 0 // tidy: a line that the lean wait most often answers
	for i, reg := range rng.Perm(5)[:queued] {
		last = regs[reg]
		id := regs[reg] + "/1"
		inLine[id] = true
		since := fmt.Sprintf("%d.%03d", now-1000+int64(i)*rng.Int64N(200), rng.IntN(1000))
		do("ZADD", st.keys[1], since, id)
		kinds := []string{"l", "l", "p"}
		if wait {
			kinds = append(kinds, "l")
		}
		kind, idle := pick(kinds...), []int64{10, 100}[rng.IntN(2)]
		info := drawInfo(rng, now, kind, idle)
		if tidy { // live, sure to try soon, its turn given and running
			due := now - 5 + rng.Int64N(10)
			lapse := due + idle
			if rng.IntN(6) == 0 {
				lapse = now // it lapses now: dropped
			}
			info = fmt.Sprintf("%s %d %d %d", kind, due, lapse, now-5+rng.Int64N(20))
			if i == 0 && rng.IntN(2) == 0 { // most often first in line: a poller due as late as a turn allows (or a ms later: passed over), its turn given or not
				kind, due = "p", now+int64(min(20, max(6, float64(idle)/3)))+rng.Int64N(2)
				info = fmt.Sprintf("p %d %d", due, due+idle)
				if rng.IntN(2) == 0 {
					info += fmt.Sprint(" ", now+rng.Int64N(5))
				}
			}
		} else if wait && strings.Count(info, " ") == 2 && rng.IntN(4) > 0 { // its turn given, most often running
			info += fmt.Sprint(" ", now-110+rng.Int64N(150))
		}
		if info != "" {
			do("HSET", st.keys[2], id, info)
		}
		if kind == "l" && rng.IntN(4) > 0 {
			do("HSET", st.keys[2], id+"|", fmt.Sprintf("%s:g %s %d %d %d %d %s",
				regs[reg], count(), []int{2000, 30000}[rng.IntN(2)], 5+rng.IntN(5), rng.IntN(3), idle, pick("0", "0", "0", "1")))
		}
		if kind == "p" && rng.IntN(5) > 0 {
			if wait && rng.IntN(4) == 0 {
				since = fmt.Sprint(now - 2000) // not its place in line: a state the scripts do not write, where both paths must still agree
			}
			do("ZADD", st.keys[4], since, id)
		}
	}
	if rng.IntN(2) == 0 {
		do("SET", st.keys[5], 1_700_000_000_000_000+rng.Int64N(1000))
	}
	for _, k := range st.keys {
		switch rng.IntN(8) {
		case 0:
			do("PEXPIRE", k, 10_000)
		case 1:
			do("PEXPIRE", k, 100_000)
		}
	}
	other := "" // a queue key of another type
	if k := st.keys[1+rng.IntN(4)]; rng.IntN(30) == 0 {
		other = k
		do("DEL", k)
		do("SET", k, "another type")
	}
	for _, reg := range regs {
		if rng.IntN(3) > 0 {
			do("HSET", "lean:heard", pfx+"turn|"+reg+"|:"+st.keys[0], 1)
		}
	}
	tok := func() string {
		if len(held) > 0 && (full && op == "release" || rng.IntN(4) == 0) {
			return held[rng.IntN(len(held))]
		}
		return fmt.Sprintf("%s:g%d#%d", regs[rng.IntN(5)], 7, permits)
	}
	prefix, idle := pfx+"turn:", []int{10, 100}[rng.IntN(2)]
	if op == "release" {
		st.args = []any{tok(), prefix, 100, 20, 5, permits, rng.IntN(2), pick("0", "0", "0", "1")}
	} else {
		reg := regs[rng.IntN(5)]
		if wait && rng.IntN(4) > 0 {
			reg = last // the last in line
		}
		id := reg + "/1"
		mine := inLine[id]
		if rng.IntN(6) == 0 && (!wait || rng.IntN(2) == 0) {
			mine = !mine
		}
		record, claim := "", ""
		if rng.IntN(3) > 0 {
			record = fmt.Sprintf("%s:g #%d 2000 %d %d %d 0", reg, permits, 3+rng.IntN(5), rng.IntN(3), idle)
		}
		if !inLine[id] && other != st.keys[2] && rng.IntN(6) == 0 { // its entry's info left behind, its place in line lost (an eviction)
			st.cmds = append(st.cmds, []any{"HSET", st.keys[2], id, fmt.Sprintf("l %d %d", now+5, now+105),
				id + "|", fmt.Sprintf("%s:g #%d 2000 %d 0 %d 0", reg, permits, 3+rng.IntN(5), idle)})
		}
		if rng.IntN(8) == 0 {
			claim = tok()
		}
		flag := func(in int) int { return min(rng.IntN(in), 1) }
		modes, compares := []string{"0", "1", "1", "2", "2", "2"}, 6
		if wait { // pollers most often, counts seldom compared
			modes, compares = []string{"0", "1", "1", "1", "2", "2"}, 12
		}
		st.args = []any{tok(), []int{2000, 30000}[rng.IntN(2)], id, pick(modes...), idle, rng.IntN(idle / 2),
			flag(4) ^ 1, prefix, 100, 20, 5, rng.IntN(3), permits, flag(3) ^ 1, map[bool]int{true: 1}[mine],
			flag(compares) ^ 1, flag(4) ^ 1, record, claim}
	}
	st.desc = fmt.Sprint(st.cmds)
	return st
}

// leanRegs are the registries whose waiters and holders the states draw;
// leanNow is the scripts' fixed clock's ms (RunLean).
var (
	leanRegs  = []string{"A", "B", "C", "D", "E"}
	leanNow   = int64(leanClock)
	leanClock = registry.LeanNow
)

// newLeanState starts a state of the six keys named after pfx (the first
// one's name ends with main: the semaphore's or the lock's key), with do,
// which adds a command that writes it, and pick, which draws one of its
// arguments.
func newLeanState(rng *rand.Rand, pfx, main string) (st *leanState, do func(...any), pick func(...string) string) {
	st = &leanState{keys: []string{pfx + main, pfx + "q", pfx + "i", pfx + "t", pfx + "p", pfx + "f"}}
	do = func(args ...any) { st.cmds = append(st.cmds, args) }
	pick = func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	return st, do, pick
}

// write sets the state up afresh.
func (st *leanState) write(do func(string, ...any) any) {
	for _, k := range append(slices.Clone(st.keys), "lean:pubs", "lean:fell", "lean:heard") {
		do("DEL", k)
	}
	for _, c := range st.cmds {
		do(c[0].(string), c[1:]...)
	}
}

// leanKey is a key as read after a run: its contents and its time to live
// (ms; -1 none).
type leanKey struct {
	name, contents string
	ttl            int64
}

// leanRun is what one run of a script did: its reply, and every key of the
// state and the messages published afterwards.
type leanRun struct {
	reply string
	keys  []leanKey
}

func (r leanRun) String() string {
	var out strings.Builder
	fmt.Fprintf(&out, "reply %s\n", r.reply)
	for _, k := range r.keys {
		fmt.Fprintf(&out, "%s (ttl %d ms): %s\n", k.name, k.ttl, k.contents)
	}
	return out.String()
}

// same reports whether r and o did the same. Where time stands still
// (frozen: miniredis) everything must be equal. On the real server, time
// passes between the two runs and while the keys are read: numbers in the
// replies may differ by 2 (a sleep that is a key's PTTL), times to live by
// 100 ms, and a key that one run gave less than 300 ms may have expired in
// the other before it was read.
func (r leanRun) same(o leanRun, frozen bool) bool {
	if frozen {
		return r.String() == o.String()
	}
	a, b := strings.Fields(r.reply), strings.Fields(o.reply)
	if !slices.EqualFunc(a, b, func(x, y string) bool {
		p, perr := strconv.ParseInt(strings.Trim(x, "[],"), 10, 64)
		q, qerr := strconv.ParseInt(strings.Trim(y, "[],"), 10, 64)
		return x == y || perr == nil && qerr == nil && strings.Trim(x, "0123456789-") == strings.Trim(y, "0123456789-") && max(p-q, q-p) <= 2
	}) {
		return false
	}
	short := func(k leanKey) bool { return k.ttl > 0 && k.ttl < 300 }
	for _, k := range r.keys {
		i := slices.IndexFunc(o.keys, func(x leanKey) bool { return x.name == k.name })
		if i < 0 {
			if !short(k) {
				return false
			}
			continue
		}
		x := o.keys[i]
		if k.contents != x.contents || (k.ttl < 0 || x.ttl < 0) && k.ttl != x.ttl || max(k.ttl-x.ttl, x.ttl-k.ttl) > 100 {
			return false
		}
	}
	for _, x := range o.keys {
		if !slices.ContainsFunc(r.keys, func(k leanKey) bool { return k.name == x.name }) && !short(x) {
			return false
		}
	}
	return true
}

// read describes every key of the state that exists, and the messages
// published.
func (st *leanState) read(do func(string, ...any) any) []leanKey {
	var out []leanKey
	for _, k := range append(slices.Clone(st.keys), "lean:pubs") {
		ttl := do("PTTL", k).(int64)
		var v any
		switch typ := do("TYPE", k).(string); typ {
		case "zset":
			v = do("ZRANGE", k, 0, -1, "WITHSCORES")
		case "hash":
			m, _ := redis.StringMap(do("HGETALL", k), nil)
			v = m
		case "list":
			v = do("LRANGE", k, 0, -1)
		case "string":
			v = do("GET", k)
		case "none":
			continue
		default:
			v = typ
		}
		out = append(out, leanKey{k, fmtReply(v), ttl})
	}
	return out
}

// fmtReply formats a reply with its bulk strings as text.
func fmtReply(v any) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case []any:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmtReply(x)
		}
		return "[" + strings.Join(s, " ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// drawLockState draws a lock key, its turn and its wait queue, and a call
// of op: "obtain" (obtain.lua) or "unlock" (release.lua). Where time stands
// still (frozen: miniredis), a lock key may expire sooner than a poll, and
// a free key may have a turn: the reply's sleep is then the key's or the
// turn's PTTL, which on the real server moves between the two runs.
func drawLockState(rng *rand.Rand, pfx, op string, frozen bool) *leanState {
	st, do, pick := newLeanState(rng, pfx, "lk")
	now, regs := leanNow, leanRegs
	token := "tok-" + regs[rng.IntN(5)]
	held := true
	switch rng.IntN(6) {
	case 0: // free
		held = false
	case 1:
		do("SET", st.keys[0], token, "PX", 100_000)
	default:
		ttl := 5_000
		if frozen && rng.IntN(2) == 0 {
			ttl = 50
		}
		do("SET", st.keys[0], "another", "PX", ttl)
	}
	if op == "unlock" && rng.IntN(4) > 0 {
		do("SET", st.keys[0], token, "PX", 100_000)
	}
	caller := regs[rng.IntN(5)] + "/1"
	// A free key's turn makes the reply's sleep its PTTL, which moves
	// between the two runs on the real server: drawn where time stands still.
	if held || frozen {
		switch rng.IntN(6) {
		case 0:
			do("SET", st.keys[3], caller, "PX", 5_000)
		case 1:
			do("SET", st.keys[3], regs[rng.IntN(5)]+"/1", "PX", 5_000)
		case 2:
			do("SET", st.keys[3], "B/1")
			if rng.IntN(2) == 0 {
				do("PEXPIRE", st.keys[3], 100_000)
			}
		}
	}
	queued := rng.IntN(5)
	if op == "unlock" {
		queued = 1 + rng.IntN(4)
	}
	for i, reg := range rng.Perm(5)[:queued] {
		id := regs[reg] + "/1"
		since := fmt.Sprintf("%d.%03d", now-1000+int64(i)*rng.Int64N(200), rng.IntN(1000))
		do("ZADD", st.keys[1], since, id)
		kind, idle := pick("l", "l", "p"), []int64{10, 30, 100}[rng.IntN(3)]
		info := drawInfo(rng, now, kind, idle)
		if info != "" {
			do("HSET", st.keys[2], id, info)
		}
		if kind == "p" && rng.IntN(5) > 0 {
			do("ZADD", st.keys[4], since, id)
		}
	}
	for _, k := range st.keys[1:5] {
		switch rng.IntN(8) {
		case 0:
			do("PEXPIRE", k, 10_000)
		case 1:
			do("PEXPIRE", k, 100_000)
		}
	}
	if k := st.keys[1+rng.IntN(4)]; rng.IntN(30) == 0 {
		do("DEL", k)
		do("SET", k, "another type")
	}
	channel := pfx + "channel:" + st.keys[0]
	if op == "unlock" {
		st.args = []any{token, channel, 100, 20, 5}
		if rng.IntN(10) == 0 {
			st.args[0] = "not-the-holder"
		}
	} else {
		idle := []int{10, 100}[rng.IntN(2)]
		st.args = []any{token, []int{2000, 30000}[rng.IntN(2)], caller, pick("0", "1", "2", "2"), idle, rng.IntN(idle / 2),
			min(rng.IntN(4), 1) ^ 1, channel, 100, 20, 5, rng.IntN(3)}
	}
	st.desc = fmt.Sprint(st.cmds)
	return st
}

// drawInfo draws the info of a queue entry of kind ('l' or 'p') whose poll
// interval is idle, as the scripts write it or not: live, lapsed, due about
// when a poller is still sure to try soon (min(ahead, max(slack+1,
// idle/3))), given a turn that ended now, a window ago or more, written
// with leading zeros, unreadable, or "" (none).
func drawInfo(rng *rand.Rand, now int64, kind string, idle int64) string {
	due := now - 50 + rng.Int64N(200)
	if kind == "p" && rng.IntN(3) == 0 {
		due = now + int64(min(20, max(6, float64(idle)/3))) + rng.Int64N(3) - 1
	}
	lapse := due + idle
	if rng.IntN(6) == 0 {
		lapse = now - rng.Int64N(10)
	}
	info := fmt.Sprintf("%s %d %d", kind, due, lapse)
	if rng.IntN(10) == 0 { // numbers written by hand: read as numbers
		info = fmt.Sprintf("%s %014d %014d", kind, due, lapse)
	}
	switch rng.IntN(12) {
	case 0:
		info += fmt.Sprint(" ", now-rng.Int64N(10))
	case 1:
		info += fmt.Sprint(" ", now-[]int64{100, 101, 200}[rng.IntN(3)]) // a turn that ended a window ago, or more
	case 2:
		info = []string{"garbage", ""}[rng.IntN(2)]
	}
	return info
}
