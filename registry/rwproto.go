package registry

import (
	"context"
	_ "embed"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// The read-write lock's scripts (lua/rw*.lua): the writer in a hash at
// the lock key, the readers in a sorted set beside it scored by their
// expiry on the server's clock, and the wait queue of a lock key. The
// rules they share (lua/rwrules.lua) follow the prelude in each.
var (
	//go:embed lua/rwrules.lua
	rwRulesSrc string
	//go:embed lua/rwacquire.lua
	rwAcquireSrc string
	//go:embed lua/rwrelease.lua
	rwReleaseSrc string
	//go:embed lua/rwrenew.lua
	rwRenewSrc string
	//go:embed lua/rwnudge.lua
	rwNudgeSrc string
	//go:embed lua/rwleave.lua
	rwLeaveSrc string
	//go:embed lua/rwdowngrade.lua
	rwDowngradeSrc string

	rwAcquireScript   = core.NewScript("rwacquire", preludeSrc+rwRulesSrc+rwAcquireSrc)
	rwReleaseScript   = core.NewScript("rwrelease", preludeSrc+rwRulesSrc+rwReleaseSrc)
	rwRenewScript     = core.NewScript("rwrenew", rwRenewSrc)
	rwNudgeScript     = core.NewScript("rwnudge", preludeSrc+rwRulesSrc+rwNudgeSrc)
	rwLeaveScript     = core.NewScript("rwleave", preludeSrc+rwRulesSrc+rwLeaveSrc)
	rwDowngradeScript = core.NewScript("rwdowngrade", preludeSrc+rwRulesSrc+rwDowngradeSrc)
)

// rwProto is the protocol of an RWLock, on one Client (a single node, a
// Sentinel master, or a Cluster: a read-write lock's keys share its
// slot). It builds each script's KEYS and ARGV, and decodes the replies
// into the mutex protocol's outcomes (reply.go).
type rwProto struct {
	one *core.ClientExec
	s   scripts
}

var _ core.Renewer = (*rwProto)(nil)

// keys returns the keys of every rw*.lua script but rwrenew.lua: the lock
// key, its wait queue, the fence counter, and its readers.
func (p *rwProto) keys(lk string) []string {
	return append(p.s.lockKeys(lk, true), p.s.layout.ReadersKey(lk))
}

// turnArgs are the arguments that give turns: the turn prefix, a
// listener's turn, and a poller's.
func (p *rwProto) turnArgs(args ...any) []any {
	s := &p.s
	return append(args, s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg)
}

// side is a script's name of the side a hold takes.
func side(write bool) string {
	if write {
		return "w"
	}
	return "r"
}

// rwGrant is rwacquire.lua's reply: the mutex protocol's grant, and for a
// reader let in, whether a writer stays in line behind its entry: its
// registry's readers that come later do not share its hold, they queue
// behind the writer.
type rwGrant struct {
	grant
	behind bool
}

// acquire takes lk's read side (write false) or write side for token, or
// queues h's waiter (h.waits) and says when to try again; record is its
// grant record ("": none), and claim says that token is its entry's grant
// token, which a grant may have given the key (rwgrant.go).
func (p *rwProto) acquire(ctx context.Context, lk, token string, ttl time.Duration, write bool, h hint, record string, claim bool) (rwGrant, error) {
	s := &p.s
	c := Call{Keys: p.keys(lk), Args: []any{token, s.ttlOf(ttl), h.waiter, s.mode(h), s.idleArg, h.spread.Milliseconds(),
		s.fenceArg, s.layout.TurnPrefix(), s.windowArg, s.aheadArg, s.slackArg, ceilMillis(h.rtt), side(write), flag(h.queued), record, flag(claim)}}
	v, err := p.one.One(ctx, rwAcquireScript, c)
	if err != nil {
		return rwGrant{grant: unknown}, err
	}
	g, err := decodeGrant(v)
	x, _ := v.([]any) // {1, fence, 1}
	return rwGrant{grant: g, behind: g.ok && len(x) == 3 && x[2] == int64(1)}, err
}

// release gives token's hold back, and reports whether it held lk, and
// whether waiters are in line.
func (p *rwProto) release(ctx context.Context, lk, token string) (done, others bool, err error) {
	return decodeRelease(p.one.One(ctx, rwReleaseScript, Call{Keys: p.keys(lk), Args: p.turnArgs(token)}))
}

// downgrade turns token's write hold into a read hold of ttl, and reports
// whether it still held lk, and whether a writer waits in line (behind:
// the registry's readers that come later do not share the hold).
func (p *rwProto) downgrade(ctx context.Context, lk, token string, ttl time.Duration) (ok, behind bool, err error) {
	v, err := p.one.One(ctx, rwDowngradeScript, Call{Keys: p.keys(lk), Args: p.turnArgs(token, p.s.ttlOf(ttl))})
	if err != nil {
		return false, false, err
	}
	n, err := core.ReplyInt(v)
	return n >= 1, n == 2, err
}

// nudge gives the turns of the line once token's hold has expired
// (ReleaseAfter); left is how long it has to live when it has not, else
// -1.
func (p *rwProto) nudge(ctx context.Context, lk, token string) (left time.Duration, err error) {
	v, err := p.one.One(ctx, rwNudgeScript, Call{Keys: p.keys(lk), Args: p.turnArgs(token)})
	if err != nil {
		return -1, err
	}
	n, err := core.ReplyInt(v)
	if err != nil || n < 0 {
		return -1, err
	}
	return time.Duration(n) * time.Millisecond, nil
}

// leave takes waiter out of lk's line; the turns go to those who may
// enter now.
func (p *rwProto) leave(ctx context.Context, lk, waiter string) error {
	_, err := p.one.One(ctx, rwLeaveScript, Call{Keys: p.keys(lk), Args: p.turnArgs(waiter)})
	return err
}

// Renew resets the expiry of token's hold of lk (the writer's key, or
// its reader's entry) to ttl from now, and reports whether it still held
// it.
func (p *rwProto) Renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	return core.DecodeDone(p.one.One(ctx, rwRenewScript, p.renewCall(lk, token, ttl)))
}

func (p *rwProto) renewCall(lk, token string, ttl time.Duration) Call {
	return Call{Keys: []string{lk, p.s.layout.ReadersKey(lk)}, Args: []any{token, p.s.ttlOf(ttl)}}
}

// RenewBatch renews many holds in one pipeline (the watchdog).
func (p *rwProto) RenewBatch(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	return renewBatchOn(ctx, p.one, rwRenewScript, calls, func(x core.RenewCall) Call { return p.renewCall(x.Key, x.Token, x.TTL) })
}
