package registry

import (
	"errors"
	"time"

	"github.com/gomodule/redigo/redis"
)

// renewBatch bounds how many renewals go in one pipelined flush: 10 000 held
// locks cost two round trips per renewal period.
const renewBatch = 5000

// track records a new hold for the watchdog and starts it on first use.
func (r *Registry) track(l *RedisLock, h *hold) {
	if !r.cfg.autoRenew {
		return
	}
	r.heldMu.Lock()
	r.held[l] = h
	r.heldMu.Unlock()
	r.startOnce(&r.renewStarted, r.renewLoop)
}

// untrack forgets h, unless l has moved on to a newer hold.
func (r *Registry) untrack(l *RedisLock, h *hold) {
	if !r.cfg.autoRenew {
		return
	}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if r.held[l] == h {
		delete(r.held, l)
	}
}

// renewLoop is the watchdog: every expireAfter/3 it renews every hold of the
// registry in pipelined batches, until Close.
func (r *Registry) renewLoop() {
	t := time.NewTicker(r.cfg.expireAfter / 3)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
			return
		case <-t.C:
			r.renewAll()
		}
	}
}

type renewal struct {
	l *RedisLock
	h *hold
}

// renewAll renews a snapshot of the held locks.
func (r *Registry) renewAll() {
	r.heldMu.Lock()
	batch := make([]renewal, 0, len(r.held))
	for l, h := range r.held {
		batch = append(batch, renewal{l, h})
	}
	r.heldMu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), renewBatch)
		r.renewBatch(batch[:n])
		batch = batch[n:]
	}
}

// renewBatch renews one batch (pipelined, or one by one with WithReplicaAck)
// and applies the replies. A renewal that failed on a pooled connection the
// server had closed (restart, CLIENT KILL) is sent again at once rather than
// a period later: renewing is idempotent.
func (r *Registry) renewBatch(batch []renewal) {
	ttlArg := r.cfg.expireAfter.Milliseconds()
	for try := 1; len(batch) > 0; try++ {
		sent := r.now()
		results := r.renewCalls(batch, ttlArg)
		var again []renewal
		var (
			lastErr error
			failed  int
		)
		for i, res := range results {
			if errors.Is(res.Err, ErrReplicaAck) {
				lastErr, failed = res.Err, failed+1
				continue
			}
			if isStaleConn(res.Err) && try < netTries && !r.isClosed() {
				again = append(again, batch[i])
				continue
			}
			if res.Err != nil && isAmbiguous(res.Err) {
				lastErr, failed = res.Err, failed+1
				continue
			}
			n, err := redis.Int(res.Reply, res.Err)
			r.applyRenewal(batch[i], n, err, sent)
		}
		if lastErr != nil {
			r.log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", failed, "err", lastErr)
		}
		batch = again
	}
}

// renewCalls runs the renewals of batch: one pipelined batch, or with
// WithReplicaAck one acknowledged renewal each. Redis errors are counted in
// Stats.
func (r *Registry) renewCalls(batch []renewal, ttl int64) []Result {
	if r.cfg.ackReplicas > 0 {
		return r.renewEach(r.bgCtx, batch, ttl)
	}
	calls := make([]Call, len(batch))
	for i, x := range batch {
		calls[i] = Call{Keys: []string{x.l.key}, Args: []any{x.h.token, ttl}}
	}
	ctx, cancel := r.bound(r.bgCtx)
	defer cancel()
	results := r.client.EvalBatch(ctx, renewScript, calls)
	for _, res := range results {
		r.stats.redisError(res.Err)
	}
	return results
}

// applyRenewal moves the deadline of a renewed hold, or marks it lost.
func (r *Registry) applyRenewal(x renewal, n int, err error, sent int64) {
	ttl := r.cfg.expireAfter
	switch {
	case x.h.released(): // an Unlock raced this renewal: nothing to report
	case err != nil:
		r.log.Warn("lockyard: renewal failed", "key", x.l.key, "err", err)
	case n == 0 || !x.h.extend(r.now(), sent+int64(ttl-drift(ttl))):
		x.h.markLost()
		r.stats.lostHold(x.h)
		r.untrack(x.l, x.h)
		r.log.Warn("lockyard: lock lost: renewal found the key gone", "key", x.l.key, "token", x.h.fence)
	default:
		r.stats.renewals.Add(1)
	}
}
