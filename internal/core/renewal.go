package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Renewer is how the holds of one lock kind are renewed: its protocol
// (mutexProto for RedisLock and Lease). Each hold carries its own, so the
// watchdog renews the holds of every kind, batch by kind.
type Renewer interface {
	// Renew resets the TTL of lk to ttl if token holds it, and reports
	// whether it did.
	Renew(ctx context.Context, lk, token string, ttl time.Duration) (bool, error)
	// RenewBatch renews many holds together: one reply per call, in
	// order.
	RenewBatch(ctx context.Context, calls []RenewCall) []RenewReply
}

// RenewCall is one renewal of a batch.
type RenewCall struct {
	Key, Token string
	TTL        time.Duration
}

// RenewReply is the outcome of one RenewCall: OK when renewed, false when
// the key was gone or another holder's, or the error.
type RenewReply struct {
	OK  bool
	Err error
}

// Renew renews one batch of the watchdog and applies the replies. A hold
// whose renewal is already in flight (RenewLock, a pass) is skipped: that
// one renews it. A renewal that failed on a pooled connection the server
// had closed (restart, CLIENT KILL) is sent again at once rather than a
// period later: renewing is idempotent.
func (w *watchdog) Renew(batch []*Hold) {
	for todo := batch; len(todo) > 0; {
		// The holds of one kind, in one batch: most registries have one.
		kind, same, rest := todo[0].Proto, todo, []*Hold(nil)
		if slices.ContainsFunc(todo, func(h *Hold) bool { return h.Proto != kind }) {
			same = nil
			for _, h := range todo {
				if h.Proto == kind {
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
			h.Renewing.Unlock()
		}
		todo = rest
	}
}

// renewKind renews holds of one kind, whose renewing locks the caller
// holds.
func (w *watchdog) renewKind(kind Renewer, batch []*Hold) {
	r := w.r
	todo := batch
	for try := 1; len(todo) > 0; try++ {
		calls := make([]RenewCall, len(todo))
		ttls := make([]time.Duration, len(todo))
		for i, h := range todo {
			ttls[i] = h.TTL()
			calls[i] = RenewCall{Key: h.key, Token: h.Token, TTL: ttls[i]}
		}
		sent := r.Now()
		var (
			again   []*Hold
			lastErr error
			failed  int
		)
		for i, res := range kind.RenewBatch(r.BG.Ctx, calls) {
			h := todo[i]
			switch {
			case IsStaleConn(res.Err) && !errors.Is(res.Err, ErrReplicaAck) && try < netTries && !r.BG.IsClosed():
				again = append(again, h)
			case res.Err != nil && (IsAmbiguous(res.Err) || errors.Is(res.Err, ErrReplicaAck)):
				lastErr, failed = res.Err, failed+1
				r.renewalFailed(h, res.Err)
			case h.Released(): // an Unlock raced this renewal: nothing to report
			case res.Err != nil:
				r.Log.Warn("lockyard: renewal failed", "key", h.key, "err", res.Err)
				r.renewalFailed(h, res.Err)
			default:
				if err := h.applyRenewal(res.OK, sent, ttls[i]); err != nil {
					r.Log.Warn("lockyard: lock lost: renewal found the key gone", "key", h.key, "token", h.Fence)
				}
			}
		}
		if lastErr != nil {
			r.Log.Warn("lockyard: renewal failed; holds stay valid until their deadline", "locks", failed, "err", lastErr)
		}
		todo = again
	}
}

// lockRenewing takes the renewing lock of each hold of batch, and returns
// those it took: a hold whose renewal is in flight, or that was released,
// is left out, and one whose validity has ended is lost, not renewed (a
// renewal would keep its key alive for a holder told it lost it).
func (w *watchdog) lockRenewing(batch []*Hold) []*Hold {
	out := batch[:0]
	for _, h := range batch {
		if !h.Renewing.TryLock() {
			continue
		}
		switch {
		case h.Released(): // passed on or released since due() picked it
			h.Renewing.Unlock()
		case h.Lost(w.r.Now()):
			h.Renewing.Unlock()
			h.Lose()
		default:
			out = append(out, h)
		}
	}
	return out
}

// Renew renews h, whose renewing lock the caller holds, to ttl (0: its
// own TTL); a ttl other than h's becomes its TTL from now on.
func (h *Hold) Renew(ctx context.Context, ttl time.Duration) error {
	r := h.r
	if ttl == 0 {
		ttl = h.TTL()
	}
	sent := r.Now()
	if h.Lost(sent) {
		h.Lose()
		return fmt.Errorf("%w: validity of %q ended before renewal", ErrLockLost, h.key)
	}
	ok, err := h.Proto.Renew(ctx, h.key, h.Token, ttl)
	if err != nil && ttl < h.TTL() && (IsAmbiguous(err) || errors.Is(err, ErrReplicaAck)) {
		// The shorter TTL may be the key's now: believe the worse. Its
		// validity ends no later than the renewal's would, and later
		// renewals use ttl.
		if h.shorten(r.Now(), ValidUntil(sent, ttl), ttl) {
			r.Watchdog.retimed(h)
		}
	}
	switch {
	case errors.Is(err, ErrReplicaAck):
		r.renewalFailed(h, err)
		return err
	case err != nil:
		r.renewalFailed(h, err)
		return WrapKey("renewing", h.key, err)
	case h.Released() && !h.Lost(r.Now()):
		// Released while the renewal was in flight (which found the key
		// deleted, or renewed it just before): not a loss.
		return fmt.Errorf("%w: %q was released during its renewal", ErrNotOwner, h.key)
	}
	return h.applyRenewal(ok, sent, ttl)
}

// applyRenewal applies the outcome of a renewal of h to ttl sent at sent:
// the key was found (ok) and the validity moves, or the hold is lost.
func (h *Hold) applyRenewal(ok bool, sent int64, ttl time.Duration) error {
	r := h.r
	if !ok {
		h.Lose()
		return KeyGone(h.key)
	}
	old := h.TTL()
	if !h.renewed(r.Now(), sent, ttl) {
		h.Lose()
		return fmt.Errorf("%w: renewal of %q completed after its validity ended", ErrLockLost, h.key)
	}
	if ttl != old {
		r.Watchdog.retimed(h)
	}
	r.Counters.Renewals.Add(1)
	return nil
}

// renewalFailed counts a renewal of h that failed with err (the hold stays
// valid until its deadline), and tells OnRenewalFailed.
func (r *Core) renewalFailed(h *Hold, err error) {
	r.Counters.RenewalsFailed.Add(1)
	if r.OnRenewalFailed != nil {
		r.OnRenewalFailed(h, err)
	}
}
