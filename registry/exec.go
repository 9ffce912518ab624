package registry

import (
	"context"
	"errors"
	"time"
)

// executor runs script calls where a registry's keys live, and knows no
// kind of lock: on one Client (a single node, a Sentinel master or a
// Cluster: clientExec), or on every node of a Redlock registry
// (quorumExec, quorum.go). A kind's protocol (mutexProto for RedisLock and
// Lease) builds the calls, decodes the replies, and applies the rule of
// each operation: one node's reply, a majority of the nodes, or every node
// best effort (quorum.go's tally); subscribe is served by any one node.
//
// Every call is bounded by the command timeout, and ctx's deadline if
// nearer; a node's call in a Redlock registry by d too.
type executor interface {
	// nodes returns how many independent masters each call runs on: 1,
	// or a Redlock registry's number of nodes.
	nodes() int
	// eval runs c of s on every node, each bounded by d (0: the command
	// timeout), and returns one Result per node, in node order.
	eval(ctx context.Context, d time.Duration, s *Script, c Call) []Result
	// evalBatch runs calls of s pipelined on every node, each node
	// bounded by d, and returns per node one Result per call.
	evalBatch(ctx context.Context, d time.Duration, s *Script, calls []Call) [][]Result
	// subscribe pattern-subscribes on one node that accepts: every node
	// publishes every release, so one subscription hears all.
	subscribe(ctx context.Context, pattern string) (Subscription, error)
	// info returns a section of the server's INFO, or errNoInfo.
	info(ctx context.Context, section string) (string, error)
}

// clientExec is the executor on one Client. It counts failed calls in
// Stats. Its Client's optional plain commands and WAIT are for a protocol
// that runs on one node only (plain, evalWait).
type clientExec struct {
	client  Client
	nx      SetNXClient    // client's plain SET NX, if it has one
	nxGet   SetNXGetClient // client's plain SET NX GET, if it has one
	timeout time.Duration  // the command timeout
	stats   *stats
}

func newClientExec(c Client, timeout time.Duration, st *stats) *clientExec {
	x := &clientExec{client: c, timeout: timeout, stats: st}
	x.nx, _ = c.(SetNXClient)
	x.nxGet, _ = c.(SetNXGetClient)
	return x
}

var _ executor = (*clientExec)(nil)

func (x *clientExec) nodes() int { return 1 }

// eval runs c of s once, bounded by the command timeout.
func (x *clientExec) eval(ctx context.Context, _ time.Duration, s *Script, c Call) []Result {
	v, err := x.one(ctx, s, c)
	return []Result{{Reply: v, Err: err}}
}

// one runs c of s once, bounded by the command timeout.
func (x *clientExec) one(ctx context.Context, s *Script, c Call) (any, error) {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	v, err := x.client.Eval(ctx, s, c.Keys, c.Args)
	x.stats.redisError(err)
	return v, err
}

func (x *clientExec) evalBatch(ctx context.Context, _ time.Duration, s *Script, calls []Call) [][]Result {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	out := x.client.EvalBatch(ctx, s, calls)
	for _, res := range out {
		x.stats.redisError(res.Err)
	}
	return [][]Result{out}
}

// evalWait runs one script call followed by WAIT replicas timeout, bounded
// by the command timeout, and returns the script's reply and the
// acknowledging replicas.
func (x *clientExec) evalWait(ctx context.Context, s *Script, c Call, replicas int, timeout time.Duration) (any, int, error) {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	v, acked, err := x.client.EvalWait(ctx, s, c.Keys, c.Args, replicas, timeout)
	x.stats.redisError(err)
	return v, acked, err
}

// plain reports which plain SET commands the Client has: SetNXClient,
// SetNXGetClient.
func (x *clientExec) plain() (setNX, setNXGet bool) {
	return x.nx != nil, x.nxGet != nil
}

// setNXCmd sends SET lk token NX PX ttl, bounded by the command timeout. The
// Client must have it (plain).
func (x *clientExec) setNXCmd(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	set, err := x.nx.SetNX(ctx, lk, token, ttl)
	x.stats.redisError(err)
	return set, err
}

// setNXGetCmd sends SET lk token NX GET PX ttl, bounded by the command
// timeout. The Client must have it (plain). A syntax error (a server
// before Redis 7.0) is not counted as a failure.
func (x *clientExec) setNXGetCmd(ctx context.Context, lk, token string, ttl time.Duration) (old string, existed bool, err error) {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	old, existed, err = x.nxGet.SetNXGet(ctx, lk, token, ttl)
	if !isSyntaxError(err) {
		x.stats.redisError(err)
	}
	return old, existed, err
}

func (x *clientExec) subscribe(ctx context.Context, pattern string) (Subscription, error) {
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	return x.client.PSubscribe(ctx, pattern)
}

func (x *clientExec) info(ctx context.Context, section string) (string, error) {
	ic, ok := x.client.(infoClient)
	if !ok {
		return "", errNoInfo
	}
	ctx, cancel := bound(ctx, x.timeout)
	defer cancel()
	return ic.Info(ctx, section)
}

// errShortBatch: a Client's EvalBatch returned fewer results than calls.
var errShortBatch = errors.New("lockyard: the client returned fewer batch replies than calls")

// errNoInfo: the executor cannot read INFO (a Client without an Info method,
// or Redlock).
var errNoInfo = errors.New("lockyard: the client cannot read INFO")

// bound returns ctx with a deadline at most timeout away. A nearer
// deadline of ctx is kept as it is, without a timer.
func bound(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}
