package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The semaphore's scripts (lua/sem*.lua): permits in a sorted set scored
// by their expiry on the server's clock, and the wait queue of a lock key
// (prelude.lua, permitRules).
var (
	//go:embed lua/semacquire.lua
	semAcquireSrc string
	//go:embed lua/semrelease.lua
	semReleaseSrc string
	//go:embed lua/sempass.lua
	semPassSrc string
	//go:embed lua/semrenew.lua
	semRenewSrc string
	//go:embed lua/semnudge.lua
	semNudgeSrc string

	semAcquireScript = core.NewScript("semacquire", preludeSrc+semAcquireSrc)
	semReleaseScript = core.NewScript("semrelease", preludeSrc+semReleaseSrc)
	semPassScript    = core.NewScript("sempass", preludeSrc+semPassSrc)
	semRenewScript   = core.NewScript("semrenew", semRenewSrc)
	semNudgeScript   = core.NewScript("semnudge", preludeSrc+semNudgeSrc)
)

// semProto is the protocol of a Semaphore, on one Client (a single node,
// a Sentinel master, or a Cluster: a semaphore's keys share its slot). It
// builds each script's KEYS and ARGV from the registry's scripts, and
// decodes the replies into the mutex protocol's outcomes (reply.go). The
// wait queue's leave is the lock's (leave.lua), which also deletes a fenced
// semaphore's counter when nothing is left.
type semProto struct {
	one *core.ClientExec
	s   scripts
	// scriptsOnly: WithScriptsOnly; plainRefused: the server refused a
	// plain release's command. Either makes every release a script.
	scriptsOnly  bool
	plainRefused atomic.Bool
}

var _ core.Renewer = (*semProto)(nil)

// semGrant is the outcome of semacquire.lua: a grant, and whether the
// caller's instance was queued again with it (more leases of its registry
// wait): sleep and after are then for the next one.
type semGrant struct {
	grant
	queued  bool
	claimed bool // the permit is the claim's (semacquire.lua's ARGV[19])
}

// acquire takes a permit of lk for token if one is free for the caller,
// out of permits; more: leases of the caller's registry wait behind it;
// compare: the attempt compares permits with the holders' count (at most
// once a second: compareEvery); quiet: the caller expects the semaphore
// free, with nobody in line.
func (p *semProto) acquire(ctx context.Context, lk, token string, ttl time.Duration, permits int, h hint, more, compare, quiet bool, record, claim string) (semGrant, error) {
	s := &p.s
	c := Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.ttlOf(ttl), h.waiter, s.mode(h), s.idleArg, h.spread.Milliseconds(),
		s.fenceArg, s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg, ceilMillis(h.rtt), permits, flag(more), flag(h.queued), flag(compare),
		flag(quiet), record, claim}}
	v, err := p.one.One(ctx, semAcquireScript, c)
	if err != nil {
		return semGrant{grant: unknown}, err
	}
	if x, ok := v.([]any); ok && len(x) == 2 && x[0] == int64(6) { // {6, fence}: the claim's
		f, ok := x[1].(int64)
		if !ok {
			return semGrant{grant: unknown}, fmt.Errorf("lockyard: unexpected reply %v", v)
		}
		return semGrant{grant: grant{ok: true, fence: f}, claimed: true}, nil
	}
	if x, ok := v.([]any); ok && len(x) == 4 { // {1, fence, sleep, after}: granted, and queued again
		n, err := replyInts([]any{x[0], x[2], x[3]}, 3)
		f, ok := x[1].(int64)
		if err != nil || !ok || n[0] != 1 {
			return semGrant{grant: unknown}, fmt.Errorf("lockyard: unexpected reply %v", v)
		}
		return semGrant{grant: grant{ok: true, fence: f, sleep: time.Duration(n[1]) * time.Millisecond, after: int(n[2])}, queued: true}, nil
	}
	g, err := decodeGrant(v)
	return semGrant{grant: g}, err
}

// otherCount turns semacquire.lua's refusal of a count of permits that
// differs from the one the semaphore's holders were made with into an
// error matching ErrInvalidConfig that names both counts, and wraps the
// reply (an error reply: the script changed nothing, core.IsAmbiguous);
// other errors are returned as they are.
func otherCount(permits int, err error) error {
	var re *core.ReplyError
	if !errors.As(err, &re) {
		return err
	}
	held, ok := strings.CutPrefix(re.Error(), "ERR lockyard permits ")
	if !ok {
		return err
	}
	return fmt.Errorf("%w: the semaphore is held with %s permits, not %d: its count changes once every permit is free (see Semaphore) (%w)",
		ErrInvalidConfig, held, permits, err)
}

// pass keeps token's permit for the next local holder, with a TTL of ttl,
// unless waiters in line need it or force is set: then it gives it back
// (passReleased: waiters are in line; passFreed: nobody is). waiter is the
// instance's entry in line, taken out with a kept permit unless more
// leases of the instance wait.
func (p *semProto) pass(ctx context.Context, lk, token, waiter string, ttl time.Duration, permits int, force, more, queued bool) (passReply, error) {
	s := &p.s
	c := Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.ttlOf(ttl), s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg,
		s.fenceArg, permits, flag(force), waiter, flag(more), flag(queued)}}
	v, err := p.one.One(ctx, semPassScript, c)
	if err != nil {
		return passReply{}, err
	}
	return decodePass(v)
}

// release gives token's permit back, and reports whether it held one,
// and whether waiters are in line.
func (p *semProto) release(ctx context.Context, lk, token string, permits int) (done, others bool, err error) {
	return releaseOn(ctx, p.one, semReleaseScript, p.releaseCall(lk, token, permits, false))
}

// releaseCall is semrelease.lua's call; given: the permit was given back
// already (releasePlain), and only the turns are left to give.
func (p *semProto) releaseCall(lk, token string, permits int, given bool) Call {
	s := &p.s
	return Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg, permits, s.fenceArg, flag(given)}}
}

// flag is a script's flag argument: 1 for true, 0 for false.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// plainOK reports whether releases may be plain commands (releasePlain):
// not on a Client without CommandClient, nor with fencing (the last release
// deletes the fence counter, which semrelease.lua does), nor WithScriptsOnly,
// nor once the server refused one of them (an ACL).
func (p *semProto) plainOK() bool {
	return p.one.HasCommands() && !p.s.fencing && !p.scriptsOnly && !p.plainRefused.Load()
}

// releasePlain gives token's permit back with a ZREM, pipelined with an
// EXISTS of the wait queue: no script, for a permit whose semaphore
// expects no waiter. waiters: the queue was not empty, or may not be (its
// EXISTS failed): the caller then gives the turns of the free permits
// (giveTurns). A waiter queued before the ZREM is seen by the EXISTS; one
// queued after it finds the permit free itself. handled false: the server
// refused the ZREM (WRONGTYPE, NOPERM), and the caller runs release
// instead.
func (p *semProto) releasePlain(ctx context.Context, lk, token string) (done, waiters, handled bool, err error) {
	res := p.one.PipelineOn(ctx, lk, [][]any{{"ZREM", lk, token}, {"EXISTS", p.s.layout.QueueKey(lk)}})
	switch {
	case res[0].Err != nil && core.IsAmbiguous(res[0].Err):
		return false, true, true, res[0].Err
	case res[0].Err != nil:
		p.refusedPlain(res[0].Err)
		return false, false, false, nil
	case res[1].Err != nil:
		p.refusedPlain(res[1].Err)
		return res[0].Reply == int64(1), true, true, nil
	}
	return res[0].Reply == int64(1), res[1].Reply != int64(0), true, nil
}

// giveTurns gives the turns of lk's free permits, out of permits, to the
// waiters first in line (semrelease.lua for a permit given back already),
// and reports whether waiters are in line.
func (p *semProto) giveTurns(ctx context.Context, lk string, permits int) (others bool, err error) {
	_, others, err = decodeRelease(p.one.One(ctx, semReleaseScript, p.releaseCall(lk, "", permits, true)))
	return others, err
}

// refusedPlain stops plain releases once the server refused one of their
// commands by ACL (which applies to the scripts' calls too: they fall back
// on other commands, as queueEmpty does); a WRONGTYPE is the key's, and
// changes nothing.
func (p *semProto) refusedPlain(err error) {
	if core.IsNoPerm(err) {
		p.plainRefused.Store(true)
	}
}

// nudge gives token's permit back once it has expired (ReleaseAfter), and
// the turns of the free permits to the waiters in line; left is how long
// it has to live when it has not expired yet, else -1.
func (p *semProto) nudge(ctx context.Context, lk, token string, permits int) (left time.Duration, err error) {
	s := &p.s
	c := Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg, permits, s.fenceArg}}
	v, err := p.one.One(ctx, semNudgeScript, c)
	if err != nil {
		return -1, err
	}
	n, err := core.ReplyInt(v)
	if err != nil || n < 0 {
		return -1, err
	}
	return time.Duration(n) * time.Millisecond, nil
}

// Renew resets the expiry of token's permit to ttl from now, and reports
// whether it still held one.
func (p *semProto) Renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	return core.DecodeDone(p.one.One(ctx, semRenewScript, Call{Keys: []string{lk}, Args: []any{token, p.s.ttlOf(ttl)}}))
}

// RenewBatch renews many permits in one pipeline (the watchdog).
func (p *semProto) RenewBatch(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	return renewBatchOn(ctx, p.one, semRenewScript, calls, func(x core.RenewCall) Call {
		return Call{Keys: []string{x.Key}, Args: []any{x.Token, p.s.ttlOf(x.TTL)}}
	})
}

// renewBatchOn renews many holds in one pipeline of script s on one node
// (a semaphore's or a read-write lock's watchdog batch), call making each
// hold's call, and decodes the replies in order.
func renewBatchOn(ctx context.Context, one *core.ClientExec, s *Script, calls []core.RenewCall, call func(core.RenewCall) Call) []core.RenewReply {
	batch := make([]Call, len(calls))
	for i, x := range calls {
		batch[i] = call(x)
	}
	res := one.EvalBatch(ctx, 0, s, batch)[0]
	out := make([]core.RenewReply, len(calls))
	for i := range calls {
		if i >= len(res) { // a Client that broke its contract
			out[i].Err = core.ErrShortBatch
			continue
		}
		out[i].OK, out[i].Err = core.DecodeDone(res[i].Reply, res[i].Err)
	}
	return out
}

// leave takes waiter out of lk's wait queue; the turns of permits free
// out of permits go to the next in line.
func (p *semProto) leave(ctx context.Context, lk, waiter string, permits int) error {
	s := &p.s
	kind := "s"
	if s.fencing {
		kind = "f"
	}
	c := Call{Keys: s.lockKeys(lk, true), Args: []any{waiter, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg, kind, permits, s.layout.TurnPrefix()}}
	_, err := p.one.One(ctx, leaveScript, c)
	return err
}
