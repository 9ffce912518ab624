package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// An RWLock's leases: release through the engine's release (the last
// lease of a shared read hold gives it back), ReleaseAfter through the
// engine's expireAfter, and Downgrade.

// An rwHold as what a Lease holds (leased).
func (p *rwHold) leaseKey() string     { return p.l.key }
func (p *rwHold) holds(le *Lease) bool { return p.h == le.h }
func (p *rwHold) endLease(ctx context.Context, le *Lease) error {
	return p.l.endLease(ctx, p, le, 0)
}
func (p *rwHold) endLeaseAfter(ctx context.Context, le *Lease, d time.Duration) error {
	return p.l.endLease(ctx, p, le, d)
}

// endLease ends le, a lease on p: the last lease on it gives p back in
// Redis (rwrelease.lua), or leaves it there for d (ReleaseAfter, 0: not),
// and the local queue moves on. Errors are those of a lock's
// Lease.Release.
func (l *RWLock) endLease(ctx context.Context, p *rwHold, le *Lease, d time.Duration) error {
	l.eng.obs.released(kindRWLock, l.key, p.h, le.since)
	err := l.unuse(ctx, p, d)
	_ = l.local.Unlock(le.who)
	l.mu.Lock()
	l.held--
	l.mu.Unlock()
	l.touch()
	return err
}

// unuse ends one use of p. The last gives it back in Redis, or, if a
// lease asked for it (ReleaseAfter, d; or an earlier lease on p), leaves
// it to expire then and tells the waiters once it has (rwnudge.lua).
func (l *RWLock) unuse(ctx context.Context, p *rwHold, d time.Duration) error {
	r := l.eng
	now := r.core.Now()
	l.mu.Lock()
	p.users--
	if d > 0 {
		p.keep = max(p.keep, now+int64(d))
	}
	last := p.users == 0
	if last && l.shared == p {
		l.shared = nil
	}
	keep := time.Duration(p.keep - now)
	l.mu.Unlock()
	h := p.h
	if !last {
		return h.LostAtRelease()
	}
	var err error
	if keep >= time.Millisecond {
		err = r.expireAfter(ctx, l.key, h, keep, func(ctx context.Context) (time.Duration, error) {
			return l.proto.nudge(ctx, l.key, h.Token)
		})
	} else {
		err = r.release(ctx, l.key, h, nil, func(ctx context.Context) (bool, error) {
			done, _, err := l.proto.release(ctx, l.key, h.Token)
			return done, err
		}, l.gone)
	}
	return h.End(err)
}

// gone is the loss of a hold that was not its lease's at its release.
func (l *RWLock) gone() error {
	return fmt.Errorf("%w: the hold of %q expired or was taken", ErrLockLost, l.key)
}

// downgrade turns le's write hold p into a read hold (rwdowngrade.lua),
// then its place in the local queue into a reader's: the readers queued
// behind it in this registry join it.
func (l *RWLock) downgrade(ctx context.Context, p *rwHold, le *Lease) error {
	r := l.eng
	h := p.h
	h.Renewing.Lock()
	defer h.Renewing.Unlock()
	l.mu.Lock()
	write := p.write
	l.mu.Unlock()
	switch {
	case le.done.Load():
		return fmt.Errorf("%w: the lease of %q was released", ErrNotOwner, l.key)
	case !write:
		return fmt.Errorf("%w: the lease of %q holds the read side", ErrNotOwner, l.key)
	case h.Lost(r.core.Now()):
		return fmt.Errorf("%w: the write hold of %q was lost", ErrLockLost, l.key)
	}
	// The script is safe to run again (a token that reads already is
	// downgraded): a reply lost to a timeout is asked again, a few times,
	// even once ctx is done. If the outcome is still unknown, the lease is
	// a reader's from now on, since it may be one in Redis, with readers
	// beside it: the error says so, and the caller must not write.
	var ok, behind bool
	var err error
	var sent int64
	for try := 0; try < 3; try++ {
		_, _, err = r.core.Retried(context.WithoutCancel(ctx), func(ctx context.Context) (bool, error) {
			var err error
			sent = r.core.Now()
			ok, behind, err = l.proto.downgrade(ctx, l.key, h.Token, h.TTL())
			return ok, err
		})
		if err == nil || !core.IsAmbiguous(err) {
			break
		}
	}
	switch {
	case err != nil && core.IsAmbiguous(err):
		l.becomeReader(p, le, sent) // a writer may wait: later readers do not join
		return core.WrapKey("downgrading (the lease may read beside other readers now: it no longer writes)", l.key, err)
	case err != nil:
		return core.WrapKey("downgrading", l.key, err)
	case !ok:
		h.Lose()
		return fmt.Errorf("%w: the write hold of %q expired or was taken", ErrLockLost, l.key)
	}
	before := int64(0)
	if behind {
		before = sent
	}
	l.becomeReader(p, le, before)
	return nil
}

// becomeReader makes le, a lease on the write hold p that Redis holds as a
// read hold now, a reader locally: new readers of this registry join it
// (before, when not 0: only those that began to wait before it, as
// rwHold.before), and the local queue lets those queued behind it in.
func (l *RWLock) becomeReader(p *rwHold, le *Lease, before int64) {
	r := l.eng
	l.mu.Lock()
	p.write, p.asked, p.before = false, r.core.Now(), before
	if !l.proto.s.fencing && (l.shared == nil || l.shared.closed) {
		l.shared = p
	}
	l.mu.Unlock()
	_ = l.local.Downgrade(le.who)
	if l.pubsub {
		r.turns.Listen(l.wake)
	}
}
