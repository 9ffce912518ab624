package registry

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// What a registry knows of one native command of its server.
const (
	capUntried int32 = iota // not known: tried, and dropped if refused
	capYes                  // the server has it (COMMAND INFO, COMMAND DOCS)
	capNo                   // the server lacks it, or refused it: never sent again
)

// native renews and releases the holds of a registry on one Client with
// the server's native compare-and-set and compare-and-delete, where the
// server has them, instead of renew.lua and release.lua:
//   - renew: SET lk token IFEQ token PX ttl (Redis 8.4+, Valkey 8.1+);
//     its reply is OK, or nil when lk is gone or another token's. (Its GET
//     form returns the old value even when the condition failed: it is not
//     used.)
//   - release: DELEX lk IFEQ token (Redis 8.4+, Valkey 9.2+) or DELIFEQ lk
//     token (Valkey 9.0+), then PUBLISH of the release message and EXISTS
//     of the wait queue, pipelined in order on one connection: one round
//     trip, no Lua.
//
// The release publishes whether or not the delete found lk ours: a message
// after a delete that found another holder (or that the server refused:
// release.lua then publishes again) wakes the waiters for nothing (each
// tries, finds lk held, and sleeps again), which the waiters of every
// Spring or lockyard registry already take in their stride: a release
// message is a hint to try, never a grant. It gives no turn to the next
// waiter as release.lua does, so it runs only where the lock expects no
// waiter (mutexProto.release); one that finds waiters all the same
// (EXISTS) is followed by nudge.lua, which gives the turn, and the lock's
// releases are release.lua until one finds nobody queued.
// In a Cluster the three commands go to the lock key's master in order;
// under a slot migration a client that follows a MOVED of the delete alone
// (rueidis) runs it after the PUBLISH, and a waiter woken by that message
// finds lk still held and sleeps to its next poll.
//
// Each command is detected on its own, once, when the registry first
// renews or releases: COMMAND INFO DELEX DELIFEQ and COMMAND DOCS SET, one
// round trip on the lock key's node (a probe that fails on the network is
// tried again by the next call, up to probeTries times). A command the
// server lacks is never sent. One that the server refuses anyway (an
// unknown command or option, NOPERM: an ACL, a proxy, a node of a Cluster
// not yet upgraded) is dropped, the script runs instead,
// Stats.NativeFallbacks counts it, and the first is logged at info level.
// Any other error reply runs the script too, for that call only.
type native struct {
	x     *core.ClientExec
	s     *scripts
	stats *core.Counters
	log   *slog.Logger
	// set, delex and delifeq are SET IFEQ, DELEX and DELIFEQ (cap*).
	set, delex, delifeq atomic.Int32
	// pubOff: PUBLISH or EXISTS was refused in the release pipeline.
	pubOff  atomic.Bool
	probed  atomic.Bool
	probing sync.Mutex
	failed  int // probes that failed on the network (probing held)
	logged  atomic.Bool
}

// probeTries bounds the probes that fail on the network (a proxy that
// drops the connection on COMMAND): after as many, the commands are tried
// untold, as when the probe was refused.
const probeTries = 3

// newNative returns the native commands of x, or nil when its Client sends
// no plain commands.
func newNative(x *core.ClientExec, s *scripts, st *core.Counters, log *slog.Logger) *native {
	if x == nil || !x.HasCommands() {
		return nil
	}
	return &native{x: x, s: s, stats: st, log: log}
}

// ready reports whether the commands are known (probed), probing them
// first on lk's node if nobody has. While another call probes, or after a
// probe that failed on the network, it reports false: the call runs its
// script, and a later one probes again.
func (n *native) ready(ctx context.Context, lk string) bool {
	if n.probed.Load() {
		return true
	}
	if !n.probing.TryLock() {
		return false
	}
	defer n.probing.Unlock()
	if n.probed.Load() {
		return true
	}
	res := n.x.PipelineOn(ctx, lk, [][]any{{"COMMAND", "INFO", "DELEX", "DELIFEQ"}, {"COMMAND", "DOCS", "SET"}})
	if core.IsAmbiguous(res[0].Err) && res[0].Err != nil || core.IsAmbiguous(res[1].Err) && res[1].Err != nil {
		if ctx.Err() != nil { // the caller's deadline, not the network: no try used up
			return false
		}
		if n.failed++; n.failed < probeTries {
			return false
		}
		res = make([]core.Result, 2) // nothing known: every command untried
	}
	if infos, ok := res[0].Reply.([]any); ok && res[0].Err == nil && len(infos) == 2 {
		n.delex.Store(known(infos[0] != nil))
		n.delifeq.Store(known(infos[1] != nil))
	}
	if docs, ok := docsOf(res[1].Reply, "set"); ok && res[1].Err == nil {
		n.set.Store(known(mentions(docs, "ifeq")))
	}
	n.probed.Store(true)
	return true
}

// docsOf returns the docs of cmd in v, a reply of COMMAND DOCS cmd: a map
// (RESP3) or a flat array of name and docs (RESP2). A reply of another
// shape (miniredis answers every COMMAND with its command table) is not
// docs.
func docsOf(v any, cmd string) (any, bool) {
	switch v := v.(type) {
	case map[any]any:
		for k, d := range v {
			if mentions(k, cmd) {
				return d, true
			}
		}
	case map[string]any:
		for k, d := range v {
			if strings.EqualFold(k, cmd) {
				return d, true
			}
		}
	case []any:
		if len(v) == 2 && mentions(v[0], cmd) {
			return v[1], true
		}
	}
	return nil, false
}

// known returns capYes if has, else capNo.
func known(has bool) int32 {
	if has {
		return capYes
	}
	return capNo
}

// mentions reports whether the reply v (arrays and maps of strings, as
// COMMAND DOCS returns in RESP2 and RESP3) holds the string word, in any
// case.
func mentions(v any, word string) bool {
	switch v := v.(type) {
	case string:
		return strings.EqualFold(v, word)
	case []byte:
		return strings.EqualFold(string(v), word)
	case []any:
		for _, e := range v {
			if mentions(e, word) {
				return true
			}
		}
	case map[any]any:
		for k, e := range v {
			if mentions(k, word) || mentions(e, word) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.EqualFold(k, word) || mentions(e, word) {
				return true
			}
		}
	}
	return false
}

// refused records that the server replied err to cmd, whose capability is
// c (nil: the release pipeline's PUBLISH or EXISTS): a command it cannot
// run (core.IsUnsupported) is dropped, and logged: the first drop at info
// level, the others at debug.
func (n *native) refused(cmd string, c *atomic.Int32, err error) {
	if !core.IsUnsupported(err) {
		return
	}
	if c != nil {
		c.Store(capNo)
	} else {
		n.pubOff.Store(true)
	}
	level := slog.LevelDebug // the first at info
	if n.logged.CompareAndSwap(false, true) {
		level = slog.LevelInfo
	}
	n.log.Log(context.Background(), level, "lockyard: the server refused a native command; its operation runs as a script from now on", "command", cmd, "err", err)
}

// fellBack counts k calls that run their script instead.
func (n *native) fellBack(k int) { n.stats.NativeFallbacks.Add(uint64(k)) }

// renewCmd is SET lk token IFEQ token PX ttl.
func (n *native) renewCmd(lk, token string, ttl time.Duration) []any {
	return []any{"SET", lk, token, "IFEQ", token, "PX", n.s.ttlOf(ttl)}
}

// renewing reports whether renewals are to be sent as SET IFEQ.
func (n *native) renewing(ctx context.Context, lk string) bool {
	return n != nil && n.ready(ctx, lk) && n.set.Load() != capNo
}

// renew renews lk for token with SET IFEQ, if renewing said so; handled
// false means the server refused it, and the caller runs renew.lua.
func (n *native) renew(ctx context.Context, lk, token string, ttl time.Duration) (ok, handled bool, err error) {
	var out [1]core.RenewReply
	if again := n.renewBatch(ctx, []core.RenewCall{{Key: lk, Token: token, TTL: ttl}}, out[:]); len(again) > 0 {
		return false, false, nil
	}
	return out[0].OK, true, out[0].Err
}

// renewBatch renews calls with SET IFEQ, pipelined, into out; it returns
// the indexes of the calls whose reply was an error reply, for the caller
// to renew by script.
func (n *native) renewBatch(ctx context.Context, calls []core.RenewCall, out []core.RenewReply) (again []int) {
	cmds := make([][]any, len(calls))
	for i, c := range calls {
		cmds[i] = n.renewCmd(c.Key, c.Token, c.TTL)
	}
	for i, res := range n.x.Pipeline(ctx, cmds)[:len(calls)] {
		if res.Err != nil && !core.IsAmbiguous(res.Err) {
			n.refused("SET IFEQ", &n.set, res.Err)
			again = append(again, i)
			continue
		}
		out[i] = core.RenewReply{OK: res.Reply != nil, Err: res.Err}
	}
	n.fellBack(len(again))
	return again
}

// delCap returns the capability of the compare-and-delete to release with
// (DELEX, else DELIFEQ), and its name; nil if there is none.
func (n *native) delCap() (*atomic.Int32, string) {
	switch {
	case n.pubOff.Load():
	case n.delex.Load() != capNo:
		return &n.delex, "DELEX"
	case n.delifeq.Load() != capNo:
		return &n.delifeq, "DELIFEQ"
	}
	return nil, ""
}

// releasing reports whether releases are to be sent as a native delete.
func (n *native) releasing(ctx context.Context, lk string) bool {
	if n == nil {
		return false
	}
	if c, _ := n.delCap(); c == nil {
		return false
	}
	return n.ready(ctx, lk)
}

// release deletes lk if token holds it, then publishes the release message
// and reads whether waiters are queued, in one pipeline (see native).
// handled false: the delete was refused, nothing was deleted, and the
// caller runs release.lua. told false: the release message may not have
// gone out (the caller tells the waiters another way).
func (n *native) release(ctx context.Context, lk, token string) (done, others, told, handled bool, err error) {
	c, name := n.delCap()
	var del []any
	switch c {
	case nil:
		return false, false, false, false, nil
	case &n.delex:
		del = []any{"DELEX", lk, "IFEQ", token}
	default:
		del = []any{"DELIFEQ", lk, token}
	}
	res := n.x.PipelineOn(ctx, lk, [][]any{del, {"PUBLISH", n.s.layout.Channel(lk), lk}, {"EXISTS", n.s.layout.QueueKey(lk)}})
	if res[0].Err != nil {
		if core.IsAmbiguous(res[0].Err) {
			return false, false, false, true, res[0].Err
		}
		n.refused(name, c, res[0].Err)
		n.fellBack(1)
		return false, false, false, false, nil
	}
	done = res[0].Reply == int64(1)
	told = res[1].Err == nil
	if !told {
		n.refused("PUBLISH", nil, res[1].Err)
	}
	if res[2].Err != nil {
		n.refused("EXISTS", nil, res[2].Err)
	}
	others = res[2].Err != nil || res[2].Reply != int64(0) // not known: as if they were
	return done, others, told, true, nil
}
