package registry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// ack is the replica acknowledgement of WithReplicaAck: WAIT replicas
// timeout after each obtain and renewal, on the same connection.
type ack struct {
	replicas int
	timeout  time.Duration
}

// obtainAcked runs obtain.lua, then WAIT on the same connection (so it
// waits for this script's writes). A lock that too few replicas
// acknowledged is released at once and reported as an error matching
// ErrReplicaAck: a failover to a replica that lacks the key would grant the
// lock a second time.
func (st *mutexProto) obtainAcked(ctx context.Context, lk, token string, c Call) (grant, error) {
	v, acked, err := st.one.EvalWait(ctx, obtainScript, c, st.ack.replicas, st.ack.timeout)
	var g grant
	if v != nil {
		var derr error
		if g, derr = decodeGrant(v); derr != nil && err == nil {
			err = derr
		}
	}
	if !g.ok || (err == nil && acked >= st.ack.replicas) {
		if err != nil {
			return unknown, err
		}
		return g, nil
	}
	ackErr := fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v", ErrReplicaAck, acked, st.ack.replicas, lk, st.ack.timeout)
	if err != nil {
		ackErr = fmt.Errorf("%w: WAIT failed: %w", ErrReplicaAck, err)
	}
	if _, _, rerr := st.release(context.WithoutCancel(ctx), lk, token, false); rerr != nil {
		ackErr = core.Join(ackErr, fmt.Errorf("lockyard: releasing %q (it expires by its TTL): %w", lk, rerr))
	}
	return unknown, ackErr
}

// renewAcked runs renew.lua, then WAIT on the same connection. A renewal
// that too few replicas acknowledged fails with an error matching
// ErrReplicaAck: a replica promoted now would expire the key at the old
// deadline, so the hold's validity must not move. The key itself keeps its
// new TTL on the master.
func (st *mutexProto) renewAcked(ctx context.Context, lk string, c Call) (bool, error) {
	v, acked, err := st.one.EvalWait(ctx, renewScript, c, st.ack.replicas, st.ack.timeout)
	done, err := core.DecodeDone(v, err)
	switch {
	case err != nil:
		return false, err
	case done && acked < st.ack.replicas:
		return false, fmt.Errorf("%w: %d of %d replicas acknowledged the renewal of %q within %v",
			ErrReplicaAck, acked, st.ack.replicas, lk, st.ack.timeout)
	}
	return done, nil
}

// ackRenewWorkers bounds the concurrent renewals of one watchdog batch with
// WithReplicaAck: each waits for its own WAIT on its own connection.
const ackRenewWorkers = 16

// renewEach renews calls one at a time, ackRenewWorkers at once: the
// watchdog's path with WithReplicaAck. Client.EvalBatch has no WAIT, and in
// a Cluster a batch spans several masters, each needing its own; EvalWait
// already handles both. With many held locks this costs a round trip per
// lock and period instead of one per batch.
func (st *mutexProto) renewEach(ctx context.Context, calls []core.RenewCall) []core.RenewReply {
	out := make([]core.RenewReply, len(calls))
	sem := make(chan struct{}, ackRenewWorkers)
	var wg sync.WaitGroup
	for i, x := range calls {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].OK, out[i].Err = st.renewAcked(ctx, x.Key, st.s.renew(x.Key, x.Token, x.TTL))
		}()
	}
	wg.Wait()
	return out
}
