package registry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/reentrant"
)

// An RWLock's acquisitions: a lease queues in the instance's local queue
// (readers together, a writer alone), then joins the registry's read hold
// or, as the head, takes a hold from Redis (rwacquire.lua), waiting its
// turn in the key's wait queue in the engine's loop (core.Acquire).

func (l *RWLock) acquire(ctx context.Context, ttl time.Duration, write, waits bool) (*Lease, error) {
	r := l.eng
	if !waits {
		le, err := l.acquireOnce(ctx, ttl, write, false)
		r.obs.tried(err)
		return le, err
	}
	r.obs.waiting(kindRWLock, l.key)
	le, err := l.acquireOnce(ctx, ttl, write, true)
	r.obs.waited(err)
	return le, err
}

// acquireOnce is acquire's attempt (the Try forms), or its wait.
func (l *RWLock) acquireOnce(ctx context.Context, ttl time.Duration, write, waits bool) (*Lease, error) {
	r := l.eng
	if ttl <= 0 {
		ttl = r.cfg.expireAfter
	} else if err := checkDuration("ttl", ttl, MinExpireAfter); err != nil {
		return nil, err
	}
	if r.core.BG.IsClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, core.WrapKey("waiting for", l.key, err)
	}
	l.touch()
	start := r.core.Now()
	who := reentrant.NewOwner()
	req := reentrant.Request{TTL: ttl}
	if !write {
		req.Mode = reentrant.Shared
	}
	l.mu.Lock()
	l.needers++
	l.mu.Unlock()
	how := reentrant.Fresh
	if waits {
		var err error
		how, err = l.local.Lock(ctx, r.core.BG.Closed, nil, req, who)
		switch {
		case errors.Is(err, reentrant.ErrAborted):
			l.done()
			return nil, ErrClosed
		case err != nil:
			l.done()
			return nil, core.WrapKey("waiting for", l.key, err)
		}
	} else if ok, _, _ := l.local.TryLock(req, who); !ok {
		l.done()
		return nil, fmt.Errorf("%w: leases of this registry hold or wait for %q", ErrNotObtained, l.key)
	}
	p, waited, err := l.obtain(ctx, ttl, write, waits, start)
	if err != nil {
		_ = l.local.Unlock(who)
		l.done()
		return nil, err
	}
	l.mu.Lock()
	l.held++
	l.mu.Unlock()
	l.done()
	return &Lease{of: p, who: who, h: p.h, since: r.obs.acquired(kindRWLock, l.key, p.h, waited || how == reentrant.Queued, time.Duration(r.core.Now()-start))}, nil
}

// done ends the wait of a lease. The last lease to stop waiting takes the
// instance out of the wait queue if it is still in it, under a new id,
// and gives back what a grant of its entry may hold (rwgrant.go).
func (l *RWLock) done() {
	l.mu.Lock()
	l.needers--
	leave, claim := "", ""
	var orphan *rwHold
	if l.needers == 0 {
		var entry string
		claim, entry, orphan = l.retireGrant()
		if l.queued != "" {
			leave, l.queued = l.queued, ""
		} else if claim != "" {
			leave = entry
		}
		if leave != "" {
			l.waiter.Renew(&l.eng.core)
		}
	}
	l.mu.Unlock()
	if orphan != nil {
		orphan.h.Retire()
		l.releaseLater(orphan.h.Token)
	}
	if leave != "" {
		l.leaveQueue(leave, claim)
	}
}

// obtain gets a lease that holds the local queue its hold: the registry's
// read hold that it joins, or one from Redis, which one lease at a time
// (the head) asks for.
func (l *RWLock) obtain(ctx context.Context, ttl time.Duration, write, waits bool, start int64) (p *rwHold, waited bool, err error) {
	r := l.eng
	if !write {
		if p := l.join(ttl, start); p != nil {
			return p, false, nil
		}
	}
	head := reentrant.NewOwner()
	if waits {
		if _, err := l.head.Lock(ctx, r.core.BG.Closed, nil, reentrant.Request{}, head); err != nil {
			if errors.Is(err, reentrant.ErrAborted) {
				return nil, false, ErrClosed
			}
			return nil, false, core.WrapKey("waiting for", l.key, err)
		}
	} else if ok, _, _ := l.head.TryLock(reentrant.Request{}, head); !ok {
		return nil, false, fmt.Errorf("%w: another lease of this registry is acquiring %q", ErrNotObtained, l.key)
	}
	defer func() { _ = l.head.Unlock(head) }()
	if !write {
		if p := l.join(ttl, start); p != nil { // another reader took a hold meanwhile
			return p, false, nil
		}
		if p := l.rejoin(ctx, ttl, start); p != nil {
			return p, false, nil
		}
	}
	if !waits {
		p, _, err := l.attempt(ctx, ttl, write, hint{waiter: l.waiter.ID() + "/t", spread: rand.N(r.cfg.idle/4 + 1)})
		switch {
		case err != nil:
			return nil, false, core.WrapKey("acquiring", l.key, err)
		case p == nil:
			return nil, false, fmt.Errorf("%w: %q is held by the other side, or is the turn of waiters in line", ErrNotObtained, l.key)
		}
		return p, false, nil
	}
	return l.wait(ctx, ttl, write)
}

// join returns the registry's read hold with one more lease on it, if a
// reader that began to wait at start may join it: it was admitted in
// Redis less than rwJoinCheck ago, with no writer in line behind it
// (rwHold.before) or before start, no writer was heard to wait, it is
// valid for two thirds of ttl, and the registry does not fence (each
// fenced lease has a token of its own).
func (l *RWLock) join(ttl time.Duration, start int64) *rwHold {
	if l.proto.s.fencing {
		return nil
	}
	now := l.eng.core.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.shared
	if p == nil || p.closed || p.before != 0 && start >= p.before || now-p.asked >= int64(rwJoinCheck) || p.h.Lost(now) || p.h.Deadline.Load()-now < int64(ttl)*2/3 {
		return nil
	}
	p.users++
	return p
}

// rejoin asks Redis whether new readers may still join the registry's read
// hold (rwacquire.lua with its token: no writer waits ahead of them), and
// returns it with one more lease on it if so, renewed to ttl when it has
// less than two thirds of that left. Otherwise no new reader joins it. A
// reader that began to wait at start, after the hold was let in with a
// writer in line behind it, does not ask: it queues behind that writer.
func (l *RWLock) rejoin(ctx context.Context, ttl time.Duration, start int64) *rwHold {
	r := l.eng
	if l.proto.s.fencing {
		return nil
	}
	l.mu.Lock()
	p := l.shared
	if p == nil || p.closed || p.before != 0 && start >= p.before || p.h.Lost(r.core.Now()) {
		l.mu.Unlock()
		return nil
	}
	p.users++ // so that it is not given back meanwhile
	l.mu.Unlock()
	sent := r.core.Now()
	g, err := l.proto.acquire(ctx, l.key, p.h.Token, max(ttl, p.h.TTL()), false, hint{waiter: l.waiter.ID() + "/r"}, "", false)
	ok := err == nil && g.ok
	if ok && p.h.Deadline.Load()-r.core.Now() < int64(ttl)*2/3 {
		p.h.Renewing.Lock()
		ok = p.h.Renew(ctx, max(ttl, p.h.TTL())) == nil
		p.h.Renewing.Unlock()
	}
	l.mu.Lock()
	if ok && !p.closed {
		p.asked, p.before = sent, 0
		if g.behind {
			p.before = sent
		}
		l.mu.Unlock()
		return p
	}
	p.closed = true
	if l.shared == p {
		l.shared = nil
	}
	l.mu.Unlock()
	_ = l.unuse(context.WithoutCancel(ctx), p, 0)
	return nil
}

// wait takes a hold from Redis for the head, in the engine's waiting loop
// (core.Acquire): rwacquire.lua until it grants one, sleeping between tries
// as the script says, woken early by the registry's turn message.
func (l *RWLock) wait(ctx context.Context, ttl time.Duration, write bool) (p *rwHold, waited bool, err error) {
	r := l.eng
	entry := l.waiter.ID() + "/" + side(write)
	l.mu.Lock()
	stale, claim := "", ""
	var orphan *rwHold
	if l.queued != "" && l.queued != entry { // the last head waited for the other side
		stale, l.queued = l.queued, ""
	}
	if l.grant.seq != 0 && l.grant.entry != entry { // and its entry's grant is of no use to this one
		var old string
		claim, old, orphan = l.retireGrant()
		if stale == "" {
			stale = old
		}
	}
	l.mu.Unlock()
	if orphan != nil {
		orphan.h.Retire()
		l.releaseLater(orphan.h.Token)
	}
	if stale != "" {
		l.leaveQueue(stale, claim)
	}
	w := core.Waiting{Key: l.key, Verb: "acquiring", Retrying: "lockyard: read-write lock acquire failed, retrying", Idle: r.cfg.idle, Wake: l.wake,
		Also: l.hasGranted, Local: func(context.Context) (bool, error) {
			p = l.takeGranted(ttl) // a grant's hold, installed for the entry (rwgrant.go)
			return p != nil, nil
		}}
	if l.pubsub {
		w.Listener = r.turns
	}
	waited, err = r.core.Acquire(ctx, &w, true, func(ctx context.Context, _ bool, _ int64) (core.Turn, error) {
		h := hint{waits: true, waiter: entry, deaf: !l.pubsub || l.deaf(), spread: rand.N(r.cfg.idle/4 + 1), rtt: l.rtt, queued: l.inLine(entry)}
		var g grant
		var err error
		if p, g, err = l.attempt(ctx, ttl, write, h); err == nil && p != nil {
			return core.Turn{OK: true}, nil
		}
		return core.Turn{Sleep: g.sleep, After: g.after}, err
	})
	return p, waited, err
}

// attempt runs rwacquire.lua once: a new hold, or nil and the grant that
// says when to try again. A read hold becomes the registry's, which new
// readers join.
func (l *RWLock) attempt(ctx context.Context, ttl time.Duration, write bool, h hint) (*rwHold, grant, error) {
	r := l.eng
	r.labels.publish(ctx) // once, before the registry's first attempt
	sent := r.core.Now()
	var (
		seq           uint64
		token, record string
		claim         bool
	)
	if h.waits {
		seq, token, record, claim = l.grantArgs(h.waiter, sent, ttl, l.asksGrants(h.deaf))
	} else {
		token = r.core.NewToken()
	}
	g, err := l.proto.acquire(ctx, l.key, token, ttl, write, h, record, claim)
	switch {
	case err != nil:
		err = wrongKind(kindRWLock, err)
		if core.IsAmbiguous(err) {
			if seq == 0 {
				l.releaseLater(token) // the script may have given it the key
			} // else the entry's next attempt, with the same token, gets that hold, or its give-up gives it back
			if h.waits {
				l.setQueued(h.waiter) // or queued the instance: the last lease to give up leaves the line
			}
		}
		return nil, unknown, err
	case !g.ok:
		if h.waits {
			l.rtt = time.Duration(r.core.Now() - sent)
			l.setQueued(h.waiter)
		}
		return nil, g.grant, nil
	}
	if h.waits {
		l.setQueued("") // the script took the entry out of line
	}
	if seq != 0 {
		l.tookGrant(seq)
	}
	deadline := core.ValidUntil(sent, ttl)
	if r.core.Now() >= deadline { // the reply came too late to be of use
		l.releaseLater(token)
		return nil, grant{sleep: 0, after: -1}, nil
	}
	p := &rwHold{l: l, write: write, users: 1, asked: sent}
	if g.behind {
		p.before = sent
	}
	p.h = core.NewHold(&r.core, l.key, token, g.fence, ttl, deadline, p, l.proto)
	r.core.Watchdog.Track(p.h)
	if !write && !l.proto.s.fencing {
		l.mu.Lock()
		l.shared = p
		l.mu.Unlock()
		if l.pubsub {
			r.turns.Listen(l.wake) // a writer that waits tells this registry
		}
	}
	return p, g.grant, nil
}

// setQueued records the instance's entry in line after the head's
// attempt ("": none).
func (l *RWLock) setQueued(id string) {
	l.mu.Lock()
	l.queued = id
	l.mu.Unlock()
}

// inLine reports whether entry is in the key's wait queue, as far as the
// instance knows.
func (l *RWLock) inLine(entry string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued == entry
}

// deaf reports whether this instance hears no turn message, and so queues
// as a poller (as Semaphore.deaf).
func (l *RWLock) deaf() bool {
	if l.eng.turns.refused.Load() {
		return true
	}
	e, ok := l.eng.cache.peek(l.name)
	return !ok || e != cached(l)
}

// leaveQueue takes the instance's old entry out of the wait queue in the
// background, so that no turn is given to it.
//
// claim, if set, is the token of a hold that a grant of the entry may
// have whose message was lost: given back once the entry has left.
func (l *RWLock) leaveQueue(id, claim string) {
	l.eng.leave(l.key, id, func(ctx context.Context, lk, id string) error {
		err := l.proto.leave(ctx, lk, id)
		if claim != "" { // even if the leave failed: a grant that comes later is given back (granted)
			if _, _, rerr := l.proto.release(ctx, lk, claim); err == nil {
				err = rerr
			}
		}
		return err
	})
}
