package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// runObtain runs obtain.lua for token. With WithReplicaAck, WAIT follows
// on the same connection (so it waits for this script's writes), and a
// lock that too few replicas acknowledged is released at once and reported
// as an error matching ErrReplicaAck: a failover to a replica that lacks
// the key would grant the lock a second time.
func (l *RedisLock) runObtain(ctx context.Context, token string) (any, error) {
	r := l.reg
	keys := l.scriptKeys()
	args := []any{token, r.ttlArg, r.markerTTLArg, r.clientIDArg}
	if r.cfg.ackReplicas == 0 {
		return r.eval(ctx, obtainScript, keys, args...)
	}
	bctx, cancel := r.bound(ctx)
	reply, acked, err := r.client.EvalWait(bctx, obtainScript, keys, args, r.cfg.ackReplicas, r.cfg.ackTimeout)
	cancel()
	r.stats.redisError(err)
	if reply == nil || !isAcquired(reply) {
		return reply, err
	}
	if err == nil && acked >= r.cfg.ackReplicas {
		return reply, nil
	}
	ackErr := fmt.Errorf("%w: %d of %d replicas acknowledged %q within %v", ErrReplicaAck, acked, r.cfg.ackReplicas, l.key, r.cfg.ackTimeout)
	if err != nil {
		ackErr = fmt.Errorf("%w: WAIT failed: %w", ErrReplicaAck, err)
	}
	if _, rerr := r.eval(context.WithoutCancel(ctx), releaseScript, []string{l.key}, token, l.channel()); rerr != nil {
		ackErr = errors.Join(ackErr, fmt.Errorf("lockyard: releasing %q (it expires by its TTL): %w", l.key, rerr))
	}
	return nil, ackErr
}

// isAcquired reports whether reply is obtain.lua's {1, fence}.
func isAcquired(reply any) bool {
	v, ok := reply.([]any)
	return ok && len(v) == 2 && v[0] == int64(1)
}

// ackRenewWorkers bounds the concurrent renewals of one watchdog batch with
// WithReplicaAck: each waits for its own WAIT on its own connection.
const ackRenewWorkers = 16

// runRenew runs renew.lua for the hold with token. With WithReplicaAck,
// WAIT follows on the same connection, and a renewal that too few replicas
// acknowledged fails with an error matching ErrReplicaAck: a replica
// promoted now would expire the key at the old deadline, so the hold's
// validity must not move. The key itself keeps its new TTL on the master.
func (l *RedisLock) runRenew(ctx context.Context, token string, ttl int64) (any, error) {
	r := l.reg
	keys, args := []string{l.key}, []any{token, ttl}
	if r.cfg.ackReplicas == 0 {
		return r.eval(ctx, renewScript, keys, args...)
	}
	bctx, cancel := r.bound(ctx)
	defer cancel()
	reply, acked, err := r.client.EvalWait(bctx, renewScript, keys, args, r.cfg.ackReplicas, r.cfg.ackTimeout)
	r.stats.redisError(err)
	switch {
	case err != nil:
		return reply, err
	case reply == int64(1) && acked < r.cfg.ackReplicas:
		return nil, fmt.Errorf("%w: %d of %d replicas acknowledged the renewal of %q within %v",
			ErrReplicaAck, acked, r.cfg.ackReplicas, l.key, r.cfg.ackTimeout)
	}
	return reply, nil
}

// renewEach renews batch one lock at a time, ackRenewWorkers at once: the
// watchdog's path with WithReplicaAck. Client.EvalBatch has no WAIT, and in
// a Cluster a batch spans several masters, each needing its own; EvalWait
// already handles both. With many held locks this costs a round trip per
// lock and period instead of one per batch.
func (r *Registry) renewEach(ctx context.Context, batch []renewal, ttl int64) []Result {
	out := make([]Result, len(batch))
	sem := make(chan struct{}, ackRenewWorkers)
	var wg sync.WaitGroup
	for i, x := range batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := x.l.runRenew(ctx, x.h.token, ttl)
			out[i] = Result{v, err}
		}()
	}
	wg.Wait()
	return out
}
