package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// Local hand-off. When the outermost Unlock finds goroutines of the same
// lock instance queued on the lock, the Redis key stays held and the hold
// passes to the head of the local queue, instead of a delete that the next
// goroutine follows with an obtain (two round trips, and a race that other
// registries win or lose at random).
//
//   - Free pass: no command at all, while the next goroutine asked for the
//     hold's TTL, the hold has at least three quarters of it left, fewer
//     than core.MaxFreePasses were made since the last command, and that
//     command was sent less than freeSpan ago (freePassSpan; twice that
//     for a semaphore of several permits). Without fencing only:
//     the next goroutine inherits the hold, its token and its fencing
//     token.
//   - Pass (mutexProto.pass, pass.lua): one round trip sets the TTL that the next
//     goroutine asked for (LockFor; else expireAfter) and, with fencing,
//     gives the next goroutine a new fencing token. If a waiter of another
//     lock instance is in line (lua/prelude.lua, nextTurn), the script
//     releases the key instead, gives that waiter its turn, and queues this
//     instance behind the waiters: the next local goroutine waits for its
//     turn as any waiter does. A store that declines to pass (Redlock)
//     makes the holder release as usual.
//   - Bound: a run of local holds ends chainSpan after the key was
//     obtained, whatever the queue says. The pass then releases the key and
//     publishes the release message even with nobody in line, and the next
//     local goroutine waits a moment (about two round trips) before it
//     tries again: a client that writes no queue entry (Spring's, an older
//     lockyard) is told or finds the key free, and gets turns too.
//
// So a waiter of another instance waits at most about MaxFreePasses+1
// local holds or freeSpan plus one hold for a run to end by script (a
// lock's freePassSpan; a semaphore's of several permits 2*freePassSpan,
// while another permit may come free sooner: see freeSpan), and the Redis
// key is touched by about one command per MaxFreePasses+1 local holds when
// nobody else waits.
//
// The free pass is the engine's rule for every kind (core.Run.FreePass,
// core.MaxFreePasses); freePassSpan and chainSpan: see options.go. The
// grace after a run that ended by its bound is the lock's (lockturn.go).
type handoffResult int

const (
	notHandedOver     handoffResult = iota // release as usual
	handedOver                             // the next local goroutine holds the lock
	releasedForOthers                      // the pass released the key for another registry
	passFailed                             // the pass failed (the error says why); releaseLater started
	releaseAfterPass                       // the pass failed on the network or transiently: release instead
)

// passer is what a kind brings to the local hand-off (engine.handOff).
type passer interface {
	// give hands the hold on to the next local waiter; notHandedOver if
	// none waits any more (they gave up meanwhile).
	give() handoffResult
	// pass runs the kind's pass script for h, retired and its renewals
	// held off, sent at sent: it sets the TTL ttl and, with fencing, gives a
	// new token (handedOver, the next hold installed), or releases for
	// others (force: the run of local holds is over), or finds the key
	// gone (a loss: ErrLockLost).
	pass(ctx context.Context, h *core.Hold, ttl time.Duration, force bool, sent int64) (handoffResult, error)
	// releaseLater frees, in the background, what h may still hold.
	releaseLater(token string)
}

// handOff passes the hold h on key to the next local waiter of the kind
// (k), whose run of local holds is run, with the TTL next that it asked
// for: a free pass when the run allows one (within freeSpan(holds) of the
// last command, holds being how many holds the key admits: a semaphore's
// permits, 1 for a lock), else the kind's pass script (the run is bounded
// by span or chainSpan, whichever is longer). The error says why a pass
// failed: releaseAfterPass (release instead: the pass did not run, or may
// have), passFailed (a loss, or a failure after which the key is freed in
// the background).
func (r *engine) handOff(ctx context.Context, key string, h *core.Hold, run *core.Run, next, span time.Duration, holds int, k passer) (handoffResult, error) {
	now := r.core.Now()
	if r.core.BG.IsClosed() || h.Lost(now) {
		return notHandedOver, nil
	}
	bounded := run.Bounded(now, max(span, r.cfg.chainSpan))
	if run.FreePass(h, next, now, r.freeSpan(holds), r.cfg.fencing, bounded) {
		return k.give(), nil
	}
	switch res, err := r.pass(ctx, h, run, next, bounded, k); {
	case errors.Is(err, ErrLockLost):
		return passFailed, err
	case core.ReleaseInstead(err):
		return releaseAfterPass, err
	case err != nil:
		// The key may or may not still be ours: free it in the
		// background rather than wait for a second command now.
		k.releaseLater(h.Token)
		return passFailed, r.releaseFailed(key, err)
	case res == handedOver:
		return k.give(), nil
	default:
		return res, nil
	}
}

// freeSpan returns how long after the last command on one of a key's
// holds free passes of it go on, holds being how many holds the key admits
// (a semaphore's permits; 1 for a lock): freePassSpan, or twice that for a
// key of several holds, the doubling capped at chainSpan (no run lasts
// longer). Where two of a semaphore's permits are in busy runs, one of
// them still ends by script, and gives a waiter of another instance its
// turn, on average about every freePassSpan, as a lock's run does, at
// about half the pass scripts. Where one permit runs and the others are
// held long, that waiter waits up to freePassSpan and a hold longer than
// with freePassSpan, and an instance that takes one permit a turn gets
// fewer turns beside busy runs (docs/PERFORMANCE.md, "Free passes of a
// semaphore's permits"). Not longer, and not in proportion to the permits: a polling
// waiter is given a turn only when a script runs within pollAhead (20ms)
// of its next poll, and misses a whole poll interval otherwise.
func (r *engine) freeSpan(holds int) time.Duration {
	span := r.cfg.freePassSpan
	if holds > 1 {
		span = min(2*span, max(span, r.cfg.chainSpan))
	}
	return span
}

// pass runs k's pass script for h. h is retired here whatever the
// outcome: a renewal of h that lands after the pass (which may give the
// key away) is not a loss. One that is in flight is waited for, so that it
// cannot reset the TTL after the pass set another; and renewing stays held
// until the next hold is installed: a renewal waiting for it then finds h
// retired, and never sends h's TTL after the pass sent another.
func (r *engine) pass(ctx context.Context, h *core.Hold, run *core.Run, next time.Duration, bounded bool, k passer) (handoffResult, error) {
	h.Retire()
	h.Renewing.Lock()
	defer h.Renewing.Unlock()
	sent := r.core.Now()
	res, err := k.pass(context.WithoutCancel(ctx), h, next, bounded, sent)
	if err == nil && res == handedOver {
		run.Sent(sent)
	}
	return res, err
}
