package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// renewer is how the holds of one lock kind are renewed: its protocol
// (mutexProto for RedisLock and Lease). Each hold carries its own, so the
// watchdog renews the holds of every kind, batch by kind.
type renewer interface {
	// renew resets the TTL of lk to ttl if token holds it, and reports
	// whether it did.
	renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error)
	// renewBatch renews many holds together: one reply per call, in
	// order.
	renewBatch(ctx context.Context, calls []renewCall) []renewReply
}

// renewCall is one renewal of a batch.
type renewCall struct {
	lk, token string
	ttl       time.Duration
}

// renewReply is the outcome of one renewCall: ok when renewed, false when
// the key was gone or another holder's, or the error.
type renewReply struct {
	ok  bool
	err error
}

// renew renews one batch of the watchdog and applies the replies. A hold
// whose renewal is already in flight (RenewLock, a pass) is skipped: that
// one renews it. A renewal that failed on a pooled connection the server
// had closed (restart, CLIENT KILL) is sent again at once rather than a
// period later: renewing is idempotent.
func (w *watchdog) renew(batch []*hold) {
	for todo := batch; len(todo) > 0; {
		// The holds of one kind, in one batch: most registries have one.
		kind, same, rest := todo[0].proto, todo, []*hold(nil)
		if slices.ContainsFunc(todo, func(h *hold) bool { return h.proto != kind }) {
			same = nil
			for _, h := range todo {
				if h.proto == kind {
					same = append(same, h)
				} else {
					rest = append(rest, h)
				}
			}
		}
		// Each kind's holds are locked only while their own batch runs.
		locked := w.lockRenewing(same)
		w.renewKind(kind, locked)
		for _, h := range locked {
			h.renewing.Unlock()
		}
		todo = rest
	}
}

// renewKind renews holds of one kind, whose renewing locks the caller
// holds.
func (w *watchdog) renewKind(kind renewer, batch []*hold) {
	r := w.r
	todo := batch
	for try := 1; len(todo) > 0; try++ {
		calls := make([]renewCall, len(todo))
		ttls := make([]time.Duration, len(todo))
		for i, h := range todo {
			ttls[i] = h.TTL()
			calls[i] = renewCall{lk: h.key, token: h.token, ttl: ttls[i]}
		}
		sent := r.now()
		var (
			again   []*hold
			lastErr error
			failed  int
		)
		for i, res := range kind.renewBatch(r.bg.ctx, calls) {
			h := todo[i]
			switch {
			case isStaleConn(res.err) && !errors.Is(res.err, ErrReplicaAck) && try < netTries && !r.bg.isClosed():
				again = append(again, h)
			case res.err != nil && (isAmbiguous(res.err) || errors.Is(res.err, ErrReplicaAck)):
				lastErr, failed = res.err, failed+1
			case h.released(): // an Unlock raced this renewal: nothing to report
			case res.err != nil:
				r.log.Warn("lockyard: renewal failed", "key", h.key, "err", res.err)
			default:
				if err := h.applyRenewal(res.ok, sent, ttls[i]); err != nil {
					r.log.Warn("lockyard: lock lost: renewal found the key gone", "key", h.key, "token", h.fence)
				}
			}
		}
		if lastErr != nil {
			r.log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", failed, "err", lastErr)
		}
		todo = again
	}
}

// lockRenewing takes the renewing lock of each hold of batch, and returns
// those it took: a hold whose renewal is in flight, or that was released,
// is left out, and one whose validity has ended is lost, not renewed (a
// renewal would keep its key alive for a holder told it lost it).
func (w *watchdog) lockRenewing(batch []*hold) []*hold {
	out := batch[:0]
	for _, h := range batch {
		if !h.renewing.TryLock() {
			continue
		}
		switch {
		case h.released(): // passed on or released since due() picked it
			h.renewing.Unlock()
		case h.lost(w.r.now()):
			h.renewing.Unlock()
			h.lose()
		default:
			out = append(out, h)
		}
	}
	return out
}

// renew renews h, whose renewing lock the caller holds, to ttl (0: its
// own TTL); a ttl other than h's becomes its TTL from now on.
func (h *hold) renew(ctx context.Context, ttl time.Duration) error {
	r := h.r
	if ttl == 0 {
		ttl = h.TTL()
	}
	sent := r.now()
	if h.lost(sent) {
		h.lose()
		return fmt.Errorf("%w: validity of %q ended before renewal", ErrLockLost, h.key)
	}
	ok, err := h.proto.renew(ctx, h.key, h.token, ttl)
	if err != nil && ttl < h.TTL() && (isAmbiguous(err) || errors.Is(err, ErrReplicaAck)) {
		// The shorter TTL may be the key's now: believe the worse. Its
		// validity ends no later than the renewal's would, and later
		// renewals use ttl.
		if h.shorten(r.now(), validUntil(sent, ttl), ttl) {
			r.watchdog.retimed(h)
		}
	}
	switch {
	case errors.Is(err, ErrReplicaAck):
		return err
	case err != nil:
		return wrapKey("renewing", h.key, err)
	case h.released() && !h.lost(r.now()):
		// Released while the renewal was in flight (which found the key
		// deleted, or renewed it just before): not a loss.
		return fmt.Errorf("%w: %q was released during its renewal", ErrNotOwner, h.key)
	}
	return h.applyRenewal(ok, sent, ttl)
}

// applyRenewal applies the outcome of a renewal of h to ttl sent at sent:
// the key was found (ok) and the validity moves, or the hold is lost.
func (h *hold) applyRenewal(ok bool, sent int64, ttl time.Duration) error {
	r := h.r
	if !ok {
		h.lose()
		return errGone(h.key)
	}
	old := h.TTL()
	if !h.renewed(r.now(), sent, ttl) {
		h.lose()
		return fmt.Errorf("%w: renewal of %q completed after its validity ended", ErrLockLost, h.key)
	}
	if ttl != old {
		r.watchdog.retimed(h)
	}
	r.stats.renewals.Add(1)
	return nil
}
