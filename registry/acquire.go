package registry

import (
	"context"
	"errors"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// Acquiring in Redis: the head of the local queue tries the obtain until it
// is granted, sleeping as the protocol says between tries, and leaves the
// wait queue if it gives up (lifecycle.go: the phases around it).

// acquire runs the obtain script until it succeeds, in the engine's
// waiting loop (core.Acquire): sleeping between tries as the script says
// (or with backoff after errors), and waking early when release messages
// say its turn may have come. The caller owns local. waited reports that
// the lock was not taken at the first attempt: another holder had it, or
// this lock instance let others go first.
func (l *RedisLock) acquire(ctx context.Context, retryAll bool, ttl time.Duration) (waited bool, err error) {
	r := l.eng
	var race time.Duration // after a release that let anyone take the key: a short poll, longer each time
	waited = l.turn.yield || l.turn.waitUntil > 0
	if l.turn.yield {
		race = 2 * l.turn.grace
	}
	if err := l.yieldFirst(ctx); err != nil {
		return waited, core.WaitErr(l.key, err, nil)
	}
	first := true
	if left := l.turn.waitUntil - r.core.Now(); l.turn.waitUntil > 0 {
		// A pass released the key for another waiter's turn and queued
		// this instance: wait for its turn before trying.
		l.turn.waitUntil = 0
		if left > 0 {
			if err := l.await(ctx, time.Duration(left), l.turn.mark, l.turn.after); err != nil {
				return waited, core.WaitErr(l.key, err, nil)
			}
		}
		first = false
	}
	w := core.Waiting{Key: l.key, Verb: "obtaining", Retrying: "lockyard: obtain failed, retrying", RetryAll: retryAll, Idle: r.cfg.idle, Wake: l.wake,
		Listener: l.listen}
	more, err := r.core.Acquire(ctx, &w, first, func(ctx context.Context, first bool, _ int64) (core.Turn, error) {
		g, err := l.attempt(ctx, ttl, first, true)
		if err != nil || g.ok || race == 0 {
			return core.Turn{OK: g.ok, Sleep: g.sleep, After: g.after}, err
		}
		// Someone took the key this instance let go: most likely a client
		// that is told of no turn (Spring's), which may not publish its
		// release either, and may take the key again at once: poll often,
		// less and less; and leave it a longer grace after the next runs.
		l.turn.foreign = max(r.core.Now(), 1)
		delay := g.sleep
		if delay < 0 {
			delay = core.PollDelay(r.cfg.idle, -1)
		}
		delay, race = min(delay, race), race*5/4
		if race >= r.cfg.idle {
			race = 0
		}
		return core.Turn{Sleep: delay, After: g.after}, nil
	})
	return waited || more, err
}

// await sleeps for d, or until release messages say that the waiter's
// turn may have come (Core.Await).
func (l *RedisLock) await(ctx context.Context, d time.Duration, mark int64, after int) error {
	return l.eng.core.Await(ctx, l.wake, d, mark, after, nil)
}

// leaveQueue takes this lock instance out of the key's wait queue, in the
// background, when its last waiter gives up: it would otherwise be given
// turns until its entry lapses. If another goroutine of this instance
// queues for the key, it carries on waiting in its place. The caller owns
// local.
func (l *RedisLock) leaveQueue() {
	if !l.turn.queued || l.local.Waiters() > 0 {
		return
	}
	l.turn.queued, l.turn.waitUntil = false, 0
	r := l.eng
	id := l.waiter.Renew(&r.core) // the next wait queues anew, out of this leave's reach
	r.leave(l.key, id, l.proto.leave)
}

// attempt runs the mutex protocol's obtain once, for a key that lives ttl. On
// success the new hold begins; on failure the grant carries the holder's
// remaining TTL. first says this is the acquisition's first attempt: the
// key is expected free unless the last acquisition found it taken. waits
// says the caller waits if it fails (see hint).
func (l *RedisLock) attempt(ctx context.Context, ttl time.Duration, first, waits bool) (grant, error) {
	r := l.eng
	r.eviction.check(ctx, r.core.Exec, r.core.Log)
	r.labels.publish(ctx) // once, before the registry's first attempt: it holds or waits from now on
	token := r.core.NewToken()
	sent := r.core.Now()
	g, err := l.proto.obtain(ctx, l.key, token, ttl, l.hint(first && !l.turn.taken, waits))
	if err == nil {
		r.eviction.answered()
		if g.ok {
			l.turn.queued = false // obtain.lua took it out of the queue
			l.turn.taken = l.turn.taken && !first
		} else {
			l.turn.taken = true
			l.turn.queued = l.turn.queued || waits
		}
	}
	if err != nil {
		err = wrongKind(kindLock, err)
		if core.IsAmbiguous(err) && !errors.Is(err, ErrReplicaAck) {
			l.releaseLater(token) // the script may have set the key before the reply was lost
		}
		return unknown, err
	}
	if !g.ok {
		l.turn.rtt = time.Duration(r.core.Now() - sent)
		return g, nil
	}
	deadline := core.ValidUntil(sent, ttl)
	if r.core.Now() >= deadline { // the reply came too late to be of use
		l.releaseLater(token)
		return grant{sleep: 0, after: -1}, nil
	}
	l.turn.run.Begin(sent)
	l.turn.span = 0
	if l.turn.freed > 0 { // the end of the last run of holds: how long did others keep the key?
		l.turn.span = min(time.Duration(sent-l.turn.freed)-l.turn.grace, maxChainSpan)
		l.turn.freed = 0
	}
	l.begin(core.NewHold(&r.core, l.key, token, g.fence, ttl, deadline, (*queueHook)(l), l.proto))
	return g, nil
}
