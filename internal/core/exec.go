package core

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Executor runs script calls where a registry's keys live, and knows no
// kind of lock: on one Client (a single node, a Sentinel master or a
// Cluster: ClientExec), or on every node of a Redlock registry
// (QuorumExec, quorum.go). A kind's protocol (mutexProto for RedisLock and
// Lease) builds the calls, decodes the replies, and applies the rule of
// each operation: one node's reply, a majority of the nodes, or every node
// best effort (quorum.go's Tally); subscribe is served by any one node.
//
// Every call is bounded by the command timeout, and ctx's deadline if
// nearer; a node's call in a Redlock registry by d too.
type Executor interface {
	// Nodes returns how many independent masters each call runs on: 1,
	// or a Redlock registry's number of Nodes.
	Nodes() int
	// Eval runs c of s on every node, each bounded by d (0: the command
	// timeout), and returns one Result per node, in node order.
	Eval(ctx context.Context, d time.Duration, s *Script, c Call) []Result
	// EvalBatch runs calls of s pipelined on every node, each node
	// bounded by d, and returns per node one Result per call.
	EvalBatch(ctx context.Context, d time.Duration, s *Script, calls []Call) [][]Result
	// Subscribe pattern-subscribes on one node that accepts: every node
	// publishes every release, so one subscription hears all.
	Subscribe(ctx context.Context, pattern string) (Subscription, error)
	// Info returns a section of the server's INFO, or errNoInfo.
	Info(ctx context.Context, section string) (string, error)
}

// ClientExec is the executor on one Client. It counts failed calls in
// Stats. Its Client's optional plain commands and WAIT are for a protocol
// that runs on one node only (plain, evalWait).
type ClientExec struct {
	client  Client
	nx      SetNXClient    // client's plain SET NX, if it has one
	nxGet   SetNXGetClient // client's plain SET NX GET, if it has one
	cmds    CommandClient  // client's plain commands, if it has them
	timeout time.Duration  // the command timeout
	stats   *Counters
}

func NewClientExec(c Client, timeout time.Duration, st *Counters) *ClientExec {
	x := &ClientExec{client: c, timeout: timeout, stats: st}
	x.nx, _ = c.(SetNXClient)
	x.nxGet, _ = c.(SetNXGetClient)
	x.cmds, _ = c.(CommandClient)
	return x
}

var _ Executor = (*ClientExec)(nil)

func (x *ClientExec) Nodes() int { return 1 }

// Eval runs c of s once, bounded by the command timeout.
func (x *ClientExec) Eval(ctx context.Context, _ time.Duration, s *Script, c Call) []Result {
	v, err := x.One(ctx, s, c)
	return []Result{{Reply: v, Err: err}}
}

// One runs c of s once, bounded by the command timeout.
func (x *ClientExec) One(ctx context.Context, s *Script, c Call) (any, error) {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	v, err := x.client.Eval(ctx, s, c.Keys, c.Args)
	x.stats.RedisError(err)
	return v, err
}

func (x *ClientExec) EvalBatch(ctx context.Context, _ time.Duration, s *Script, calls []Call) [][]Result {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	out := x.client.EvalBatch(ctx, s, calls)
	for _, res := range out {
		x.stats.RedisError(res.Err)
	}
	return [][]Result{out}
}

// EvalWait runs one script call followed by WAIT replicas timeout, bounded
// by the command timeout, and returns the script's reply and the
// acknowledging replicas.
func (x *ClientExec) EvalWait(ctx context.Context, s *Script, c Call, replicas int, timeout time.Duration) (any, int, error) {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	v, acked, err := x.client.EvalWait(ctx, s, c.Keys, c.Args, replicas, timeout)
	x.stats.RedisError(err)
	return v, acked, err
}

// Plain reports which Plain SET commands the Client has: SetNXClient,
// SetNXGetClient.
func (x *ClientExec) Plain() (setNX, setNXGet bool) {
	return x.nx != nil, x.nxGet != nil
}

// SetNXCmd sends SET lk token NX PX ttl, bounded by the command timeout. The
// Client must have it (plain).
func (x *ClientExec) SetNXCmd(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	set, err := x.nx.SetNX(ctx, lk, token, ttl)
	x.stats.RedisError(err)
	return set, err
}

// SetNXGetCmd sends SET lk token NX GET PX ttl, bounded by the command
// timeout. The Client must have it (plain). A syntax error (a server
// before Redis 7.0) is not counted as a failure.
func (x *ClientExec) SetNXGetCmd(ctx context.Context, lk, token string, ttl time.Duration) (old string, existed bool, err error) {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	old, existed, err = x.nxGet.SetNXGet(ctx, lk, token, ttl)
	if !IsSyntaxError(err) {
		x.stats.RedisError(err)
	}
	return old, existed, err
}

// HasCommands reports whether the Client sends plain commands
// (CommandClient).
func (x *ClientExec) HasCommands() bool { return x.cmds != nil }

// Pipeline sends cmds, each routed by its key, bounded by the command
// timeout (CommandClient.Pipeline). A failure that is not the server's
// reply is counted in Stats; an error reply is the caller's to judge.
func (x *ClientExec) Pipeline(ctx context.Context, cmds [][]any) []Result {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	return x.counted(x.cmds.Pipeline(ctx, cmds), len(cmds))
}

// PipelineOn sends cmds in order on the node of key, bounded by the
// command timeout (CommandClient.PipelineOn), and counts failures as
// Pipeline does.
func (x *ClientExec) PipelineOn(ctx context.Context, key string, cmds [][]any) []Result {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	return x.counted(x.cmds.PipelineOn(ctx, key, cmds), len(cmds))
}

// counted counts the failures of out that are not error replies, and pads
// out to n results (a Client that broke its contract) with ErrShortBatch.
func (x *ClientExec) counted(out []Result, n int) []Result {
	for len(out) < n {
		out = append(out, Result{Err: ErrShortBatch})
	}
	for _, r := range out {
		if r.Err != nil && IsAmbiguous(r.Err) {
			x.stats.RedisError(r.Err)
		}
	}
	return out
}

func (x *ClientExec) Subscribe(ctx context.Context, pattern string) (Subscription, error) {
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	return x.client.PSubscribe(ctx, pattern)
}

// SubscribeChannels subscribes to channels if the Client can
// (ChannelSubscriber); ok is false when it cannot, and the caller
// pattern-subscribes instead.
func (x *ClientExec) SubscribeChannels(ctx context.Context, channels ...string) (sub ChannelSubscription, ok bool, err error) {
	cs, ok := x.client.(ChannelSubscriber)
	if !ok {
		return nil, false, nil
	}
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	sub, err = cs.SubscribeChannels(ctx, channels...)
	return sub, true, err
}

// CanSubscribeChannels reports whether the Client is a ChannelSubscriber.
func (x *ClientExec) CanSubscribeChannels() bool {
	_, ok := x.client.(ChannelSubscriber)
	return ok
}

func (x *ClientExec) Info(ctx context.Context, section string) (string, error) {
	ic, ok := x.client.(infoClient)
	if !ok {
		return "", ErrNoInfo
	}
	ctx, cancel := Bound(ctx, x.timeout)
	defer cancel()
	return ic.Info(ctx, section)
}

// ErrShortBatch: a Client's EvalBatch returned fewer results than calls.
var ErrShortBatch = errors.New("lockyard: the client returned fewer batch replies than calls")

// ErrNoInfo: the executor cannot read INFO (a Client without an Info method,
// or Redlock).
var ErrNoInfo = errors.New("lockyard: the client cannot read INFO")

// Bound returns ctx with a deadline at most timeout away. A nearer
// deadline of ctx is kept as it is, without a timer.
func Bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// ReplyInt returns the integer reply v.
func ReplyInt(v any) (int64, error) {
	if n, ok := v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("lockyard: unexpected reply %v (%T), want an integer", v, v)
}

// DecodeDone decodes the 1 (done) or 0 (the key was gone or another
// holder's) of release.lua and renew.lua.
func DecodeDone(v any, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := ReplyInt(v)
	return n >= 1, err // release.lua's 2: done, and registries wait
}
