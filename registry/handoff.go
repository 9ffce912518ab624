package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
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
//     command was sent less than freePassSpan ago. Without fencing only:
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
// local holds or freePassSpan plus one hold, and the Redis key is touched
// by about one command per MaxFreePasses+1 local holds when nobody else
// waits.
//
// The free pass is the engine's rule for every kind (core.Run.FreePass,
// core.MaxFreePasses); freePassSpan and chainSpan: see options.go.
const (
	// maxChainSpan bounds a run that matches the run of a client that took
	// the key at the end of the last one (see turn.span).
	maxChainSpan = 250 * time.Millisecond
)

// graceSlack is added to two round trips for the grace after a run of
// local holds: room for the told client's scheduling. The grace is at
// least 1/graceShare of the run: with two round trips alone (about 0.6 ms
// after a 24 ms run), a Spring SPIN client polling every 100 ms found the
// key free in 3-4% of its tries, 2 to 16 times in 10 s, and waited up to
// 6.3 s (issue 37, fault 4); the floor costs the registry at most a tenth
// of its throughput, only while the key's runs end by their bound.
const (
	graceSlack = 500 * time.Microsecond
	graceShare = 10
)

// turn is the hand-off bookkeeping of one lock instance, owned by the
// goroutine that owns its local mutex.
type turn struct {
	run core.Run // the run of local holds: when it began, its last command, its free passes
	// span bounds the current run of local holds: chainSpan, or as long
	// as this instance waited, after its last run, for a client that took
	// the key meanwhile and writes no queue entry (up to maxChainSpan):
	// against a client that takes the key again at once after each of its
	// releases (a Spring client in a loop), and so wins most races for
	// it, the two get about equal time.
	span time.Duration
	// freed: when (mono ns) the last run ended with a release to nobody
	// in line (0: it did not).
	freed int64
	// rtt: the last round trip of an obtain or a pass that was not
	// granted the key (a poller's next try reaches the server that long
	// after its sleep).
	rtt time.Duration
	// yield: the key was released at the end of a run of local holds;
	// the next acquisition waits grace before its first attempt.
	yield bool
	grace time.Duration
	// waitUntil (mono ns; 0: none) and after: a pass released the key for
	// another waiter's turn and queued this instance; the next acquisition
	// waits until then, or for after release messages, before it tries.
	waitUntil int64
	mark      int64 // the waker's count of messages when the pass was sent
	after     int
	// taken: an obtain found the key held, and no acquisition has since
	// got it at its first attempt. While it is set, a first attempt runs
	// the obtain script at once instead of trying a plain SET first.
	taken bool
	// crowded: the last release found waiters queued. Unlike taken, an
	// acquisition at the first attempt does not clear it (obtain.lua may
	// give a free key to a caller while a poller not yet due waits): only
	// a release that finds nobody queued does. While it is set, releases
	// run release.lua, which gives the turn (mutexProto.release).
	crowded bool
	// queued: this instance's entry is in the key's wait queue (a waiting
	// attempt failed, or a pass queued it, and no acquisition has
	// succeeded since).
	queued bool
}

type handoffResult int

const (
	notHandedOver     handoffResult = iota // release as usual
	handedOver                             // the next local goroutine holds the lock
	releasedForOthers                      // the pass released the key for another registry
	passFailed                             // the pass failed (the error says why); releaseLater started
	releaseAfterPass                       // the pass failed on the network or transiently: release instead
)

// handOff passes the hold h of who, whose outermost unlock this is, to the
// next local waiter. The error says why a pass failed.
func (l *RedisLock) handOff(ctx context.Context, h *core.Hold, who reentrant.Owner) (handoffResult, error) {
	r := l.eng
	now := r.core.Now()
	if r.core.BG.IsClosed() || h.Lost(now) {
		return notHandedOver, nil
	}
	next := r.cfg.expireAfter // the TTL the next goroutine asked for
	if req, ok := l.local.Next(); ok && req.TTL > 0 {
		next = req.TTL
	}
	bounded := l.turn.run.Bounded(now, max(l.turn.span, r.cfg.chainSpan))
	if l.turn.run.FreePass(h, next, now, r.cfg.freePassSpan, r.cfg.fencing, bounded) {
		return l.giveLocal(who), nil
	}
	switch res, err := l.pass(ctx, h, next, bounded); {
	case errors.Is(err, ErrLockLost):
		return passFailed, err
	case core.ReleaseInstead(err):
		return releaseAfterPass, err
	case err != nil:
		// The key may or may not still be ours: free it in the
		// background rather than wait for a second command now.
		l.eng.releaseLater(l.key, h.Token)
		return passFailed, l.eng.releaseFailed(l.key, err)
	case res == handedOver:
		return l.giveLocal(who), nil
	default:
		return res, nil
	}
}

// giveLocal hands the local mutex, with the current hold, to the head of
// the queue. If the waiters left meanwhile who still owns both.
func (l *RedisLock) giveLocal(who reentrant.Owner) handoffResult {
	ok, err := l.local.HandOff(who)
	if err != nil {
		panic("lockyard: internal error: local mutex not held: " + err.Error())
	}
	if !ok {
		return notHandedOver
	}
	return handedOver
}

// pass runs the protocol's pass for h, setting the key's TTL to ttl; force
// releases it even with nobody in line (the run of local holds is over).
// When the key is kept it replaces h with a hold of ttl renewed from the
// pass's send time (and, with fencing, a new token).
func (l *RedisLock) pass(ctx context.Context, h *core.Hold, ttl time.Duration, force bool) (handoffResult, error) {
	r := l.eng
	// h is retired here whatever the outcome: a renewal of h that lands
	// after the pass (which may delete the key) is not a loss. One that is
	// in flight is waited for, so that it cannot reset the TTL after the
	// pass set another.
	// renewing stays held until the next hold is installed: a renewal
	// waiting for it then finds h released and renews the new hold, or
	// nothing, but never sends h's TTL after the pass sent another.
	h.Retire()
	h.Renewing.Lock()
	defer h.Renewing.Unlock()
	l.turn.mark = l.wake.Mark() // release messages from now on count for the next holder's wait
	sent := r.core.Now()
	p, err := r.mutex.pass(context.WithoutCancel(ctx), l.key, h.Token, ttl, l.hint(false, true), force)
	if err != nil {
		return notHandedOver, err
	}
	rtt := time.Duration(r.core.Now() - sent)
	l.turn.run.LastCmd, l.turn.rtt = sent, rtt
	switch p.outcome {
	case passKept:
		l.turn.run.Sent(sent)
		l.install(core.NewHold(&r.core, l.key, h.Token, p.fence, ttl, core.ValidUntil(sent, ttl), (*queueHook)(l), r.mutex))
		return handedOver, nil
	case passReleased:
		l.turn.waitUntil, l.turn.after = sent+int64(p.sleep), p.after
		l.turn.queued, l.turn.taken = true, true
		r.subscriber.Listen(l.wake) // its turn is announced by a release message
		return releasedForOthers, nil
	case passFreed:
		// Long enough for a client told by the release message to take
		// the key (its wake-up and its obtain), and at least a tenth of
		// the run that ends (of at most maxChainSpan: a run of long holds
		// does not idle the key longer): a client that polls and writes no
		// queue entry (Spring's SPIN) finds the key free in that share of
		// its tries.
		run := min(time.Duration(sent-l.turn.run.Since), maxChainSpan)
		l.turn.yield, l.turn.grace = true, min(max(2*rtt+graceSlack, run/graceShare), r.cfg.idle)
		l.turn.taken, l.turn.freed = true, sent
		return releasedForOthers, nil
	case passGone:
		return notHandedOver, core.KeyGone(l.key)
	}
	return notHandedOver, nil // declined
}

// inherit takes over a hold handed over by the previous local holder, if
// any, and reports whether the calling goroutine, which asked for a TTL of
// ttl, now holds the lock. A hold of another TTL (the goroutine it was
// meant for gave up, and this one was next) is renewed to ttl first. A hold
// that is no longer valid is dropped and its key freed in the background.
func (l *RedisLock) inherit(ctx context.Context, ttl time.Duration) bool {
	h := l.hold.Load()
	if h == nil {
		return false
	}
	if h.TTL() != ttl && !h.Lost(l.eng.core.Now()) {
		_ = l.renew(ctx, ttl) // a failure leaves h lost, or valid at its TTL
	}
	if !h.Lost(l.eng.core.Now()) {
		l.setPhase(held)
		l.touch()
		if l.local.Waiters() > 0 {
			h.Guard()
		}
		return true
	}
	h.Lose() // the caller owns the mutex, not yet held: nothing is revoked
	h.Retire()
	l.hold.Store(nil)
	l.eng.releaseLater(l.key, h.Token)
	return false
}

// yieldFirst makes the first acquisition after the end of a run of local
// holds wait grace, so that another client, told by the release message or
// polling, can take the key.
func (l *RedisLock) yieldFirst(ctx context.Context) error {
	if !l.turn.yield {
		return nil
	}
	l.turn.yield = false
	return l.eng.core.BG.Sleep(ctx, l.turn.grace, nil)
}
