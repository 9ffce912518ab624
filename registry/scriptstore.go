package registry

import (
	"context"
	"errors"
	"time"
)

// scriptStore is the store on one Client: a single node, a Sentinel
// master or a Cluster. Each operation is one Lua script; with
// WithReplicaAck, obtains and renewals wait for replicas (replica.go).
type scriptStore struct {
	client  Client
	setNX   SetNXClient // client's plain SET NX PX, when it has one and fencing is off
	s       scripts
	timeout time.Duration // the command timeout
	stats   *stats
	ack     ack // replicas to wait for; zero without WithReplicaAck
}

func newScriptStore(c Client, s scripts, cfg config, st *stats) *scriptStore {
	store := &scriptStore{client: c, s: s, timeout: cfg.commandTimeout, stats: st,
		ack: ack{replicas: cfg.ackReplicas, timeout: cfg.ackTimeout}}
	if sc, ok := c.(SetNXClient); ok && !cfg.fencing && cfg.ackReplicas == 0 {
		store.setNX = sc
	}
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

// obtain runs the obtain script. When the caller expects lk to be free and
// nothing but the SET is needed (setNX), it first sends a plain SET NX PX,
// which does what the script's first line does with less work for the
// server (no script call, two fewer keys and arguments); only if the key
// is taken does the script run, for the wait marker and the holder's TTL
// (or to find the key already token's, after a lost reply).
func (st *scriptStore) obtain(ctx context.Context, lk, token string, ttl time.Duration, h hint) (grant, error) {
	if h.free && st.setNX != nil {
		if ok, err := st.plainSetNX(ctx, lk, token, ttl); err != nil || ok {
			return grant{ok: ok, pttl: -1}, err
		}
	}
	c := st.s.obtain(lk, token, ttl, h.waits)
	if st.ack.replicas > 0 {
		return st.obtainAcked(ctx, lk, token, c)
	}
	v, err := st.eval(ctx, obtainScript, c)
	if err != nil {
		return grant{pttl: -1}, err
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

func (st *scriptStore) pass(ctx context.Context, lk, token string, ttl time.Duration) (passReply, error) {
	v, err := st.eval(ctx, passScript, st.s.pass(lk, token, ttl))
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

func (st *scriptStore) leave(ctx context.Context, lk string) error {
	_, err := st.eval(ctx, leaveScript, st.s.leave(lk))
	return err
}

func (st *scriptStore) subscribe(ctx context.Context) (Subscription, error) {
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	return st.client.PSubscribe(ctx, st.s.layout.ChannelPattern())
}

// errNoInfo: the Client has no Info method.
var errNoInfo = errors.New("lockyard: the client cannot read INFO")

func (st *scriptStore) info(ctx context.Context, section string) (string, error) {
	ic, ok := st.client.(infoClient)
	if !ok {
		return "", errNoInfo
	}
	ctx, cancel := bound(ctx, st.timeout)
	defer cancel()
	return ic.Info(ctx, section)
}
