package registry

import (
	"context"
	"errors"
	"strings"
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
		err := r.renewBatch(batch[:n])
		// A pooled connection the server closed (restart, CLIENT KILL):
		// renewing is idempotent, so try again at once rather than a
		// period later.
		for try := 1; isStaleConn(err) && try < netTries && !r.isClosed(); try++ {
			err = r.renewBatch(batch[:n])
		}
		if err != nil {
			r.log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", n, "err", err)
		}
		batch = batch[n:]
	}
}

// renewBatch sends one pipelined batch of renew scripts on one connection
// and applies the replies. Scripts missing from the server's cache are sent
// again as EVAL in a second round trip.
func (r *Registry) renewBatch(batch []renewal) error {
	ctx, cancel := context.WithTimeout(r.bgCtx, r.cfg.commandTimeout)
	defer cancel()
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ttl := r.cfg.expireAfter
	sent := r.now()
	replies, err := pipeline(ctx, c, batch, func(x renewal) error {
		return renewScript.SendHash(c, x.l.key, x.h.token, ttl.Milliseconds())
	})
	if err != nil {
		return err
	}
	var retry []renewal
	for i, rep := range replies {
		if isNoScript(rep.err) {
			retry = append(retry, batch[i])
			continue
		}
		r.applyRenewal(batch[i], rep.n, rep.err, sent)
	}
	if len(retry) == 0 {
		return nil
	}
	replies, err = pipeline(ctx, c, retry, func(x renewal) error {
		return renewScript.Send(c, x.l.key, x.h.token, ttl.Milliseconds())
	})
	if err != nil {
		return err
	}
	for i, rep := range replies {
		r.applyRenewal(retry[i], rep.n, rep.err, sent)
	}
	return nil
}

type reply struct {
	n   int
	err error
}

// pipeline sends one command per item, flushes, and reads every reply.
func pipeline(ctx context.Context, c redis.Conn, items []renewal, send func(renewal) error) ([]reply, error) {
	for _, x := range items {
		if err := send(x); err != nil {
			return nil, err
		}
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	out := make([]reply, len(items))
	for i := range items {
		v, err := redis.ReceiveContext(c, ctx)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			return nil, err // the connection is broken: the rest is unknown
		}
		out[i].n, out[i].err = redis.Int(v, err)
	}
	return out, nil
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
		r.untrack(x.l, x.h)
		r.log.Warn("lockyard: lock lost: renewal found the key gone", "key", x.l.key)
	}
}

func isNoScript(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(string(re), "NOSCRIPT")
}
