package registry

import (
	"context"
	"errors"
	"fmt"
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
