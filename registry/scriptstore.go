package registry

import (
	"context"
	"sync/atomic"
	"time"
)

// scriptStore is the store on one Client: a single node, a Sentinel
// master or a Cluster. Each operation is one Lua script; with
// WithReplicaAck, obtains and renewals wait for replicas (replica.go).
type scriptStore struct {
	client   Client
	setNX    SetNXClient    // client's plain SET NX PX, when it has one and fencing is off
	setNXGet SetNXGetClient // client's SET NX GET PX, under the same conditions
	noGet    atomic.Bool    // the server refused SET NX GET (before Redis 7.0)
	s        scripts
	timeout  time.Duration // the command timeout
	stats    *stats
	ack      ack // replicas to wait for; zero without WithReplicaAck
}

func newScriptStore(c Client, s scripts, cfg config, st *stats) *scriptStore {
	store := &scriptStore{client: c, s: s, timeout: cfg.commandTimeout, stats: st,
		ack: ack{replicas: cfg.ackReplicas, timeout: cfg.ackTimeout}}
	if cfg.fencing || cfg.ackReplicas > 0 {
		return store // the obtain script, always
	}
	store.setNX, _ = c.(SetNXClient)
	store.setNXGet, _ = c.(SetNXGetClient)
	return store
}

// eval runs one script call, bounded by the command timeout.
func (st *scriptStore) eval(ctx context.Context, s *Script, c Call) (any, error) {
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	v, err := st.client.Eval(ctx, s, c.Keys, c.Args)
	st.stats.redisError(err)
	return v, err
}

// obtain runs the obtain script. When the caller expects lk to be free
// and nothing but the SET is needed, it first sends a plain command, which
// does what the script's first lines do with less work for the server:
//   - a waiting caller (Lock) sends SET NX PX; only if the key is taken
//     does the script run, to queue it and say how long it sleeps;
//   - a caller that does not wait (TryLock) sends SET NX GET PX, one round
//     trip whether it succeeds or fails: the value it returns is the
//     holder's, this token's own after a resend that followed a lost
//     reply.
//
// Either skips the turn of a waiter that the key may be kept for: a lock
// instance expects its key free only while its acquisitions find it free
// and its releases find nobody queued.
func (st *scriptStore) obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	switch {
	case h.free && !h.waits && st.setNXGet != nil && !st.noGet.Load():
		g, err := st.plainSetNXGet(ctx, lk, token, ttl)
		if !isSyntaxError(err) {
			return g, err
		}
		st.noGet.Store(true) // an older server: the script from now on
	case h.free && st.setNX != nil:
		if ok, err := st.plainSetNX(ctx, lk, token, ttl); err != nil || ok {
			return grant{ok: ok, sleep: -1, after: -1}, err
		}
	}
	c := st.s.obtain(lk, token, ttl, h)
	if st.ack.replicas > 0 {
		return st.obtainAcked(ctx, lk, token, c)
	}
	v, err := st.eval(ctx, obtainScript, c)
	if err != nil {
		return unknown, err
	}
	return decodeGrant(v)
}

// plainSetNX sends SET lk token NX PX ttl, bounded by the command timeout.
func (st *scriptStore) plainSetNX(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	ok, err := st.setNX.SetNX(ctx, lk, token, ttl)
	st.stats.redisError(err)
	return ok, err
}

// plainSetNXGet sends SET lk token NX GET PX ttl, bounded by the command
// timeout: acquired if the key was absent, or held token already.
func (st *scriptStore) plainSetNXGet(ctx context.Context, lk, token string, ttl time.Duration) (grant, error) {
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	old, existed, err := st.setNXGet.SetNXGet(ctx, lk, token, ttl)
	if !isSyntaxError(err) {
		st.stats.redisError(err)
	}
	if err != nil {
		return unknown, err
	}
	if !existed || old == token {
		return grant{ok: true}, nil
	}
	return unknown, nil
}

func (st *scriptStore) pass(ctx context.Context, lk, token string, ttl time.Duration, h hint, force bool) (passReply, error) {
	v, err := st.eval(ctx, passScript, st.s.pass(lk, token, ttl, h, force))
	if err != nil {
		return passReply{}, err
	}
	return decodePass(v)
}

func (st *scriptStore) renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error) {
	c := st.s.renew(lk, token, ttl)
	if st.ack.replicas > 0 {
		return st.renewAcked(ctx, lk, c)
	}
	return decodeDone(st.eval(ctx, renewScript, c))
}

// renewBatch pipelines the renewals in one EvalBatch; with WithReplicaAck
// it renews them one by one instead (see renewEach).
func (st *scriptStore) renewBatch(ctx context.Context, calls []renewCall) []renewReply {
	if st.ack.replicas > 0 {
		return st.renewEach(ctx, calls)
	}
	batch := make([]Call, len(calls))
	for i, x := range calls {
		batch[i] = st.s.renew(x.lk, x.token, x.ttl)
	}
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	out := make([]renewReply, len(calls))
	for i, res := range st.client.EvalBatch(ctx, renewScript, batch) {
		st.stats.redisError(res.Err)
		out[i].ok, out[i].err = decodeDone(res.Reply, res.Err)
	}
	return out
}

func (st *scriptStore) release(ctx context.Context, lk, token string) (done, others bool, err error) {
	return decodeRelease(st.eval(ctx, releaseScript, st.s.release(lk, token)))
}

func (st *scriptStore) leave(ctx context.Context, lk, waiter string) error {
	_, err := st.eval(ctx, leaveScript, st.s.leave(lk, waiter))
	return err
}

func (st *scriptStore) nudge(ctx context.Context, lk, token string) (time.Duration, error) {
	v, err := st.eval(ctx, nudgeScript, st.s.nudge(lk, token))
	if err != nil {
		return 0, err
	}
	n, err := replyInt(v)
	if n < 0 {
		return -1, err
	}
	return time.Duration(n) * time.Millisecond, err
}

func (st *scriptStore) subscribe(ctx context.Context) (Subscription, error) {
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	return st.client.PSubscribe(ctx, st.s.layout.ChannelPattern())
}

func (st *scriptStore) info(ctx context.Context, section string) (string, error) {
	ic, ok := st.client.(infoClient)
	if !ok {
		return "", errNoInfo
	}
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	return ic.Info(ctx, section)
}
