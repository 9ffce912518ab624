package registry

import (
	_ "embed"
	"strings"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// The Lua scripts, one per operation; each file's header lists its KEYS,
// ARGV and reply. The rules that obtain, pass, release and leave share
// (the clock, the fence counter, the wait queue) are written once, in
// lua/prelude.lua, which is prepended to each of them. Clients run them as
// EVALSHA, falling back to EVAL on NOSCRIPT, so a SCRIPT FLUSH or a
// restarted server costs one extra command and no error.
var (
	//go:embed lua/prelude.lua
	preludeSrc string
	//go:embed lua/obtain.lua
	obtainSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/drop.lua
	dropSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/pass.lua
	passSrc string
	//go:embed lua/fence.lua
	fenceSrc string
	//go:embed lua/leave.lua
	leaveSrc string
	//go:embed lua/nudge.lua
	nudgeSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/label.lua
	labelSrc string

	obtainScript  = core.NewScript("obtain", preludeSrc+obtainSrc)
	releaseScript = core.NewScript("release", preludeSrc+releaseSrc)
	dropScript    = core.NewScript("drop", dropSrc)
	renewScript   = core.NewScript("renew", renewSrc)
	passScript    = core.NewScript("pass", preludeSrc+passSrc)
	fenceScript   = core.NewScript("fence", fenceSrc)
	leaveScript   = core.NewScript("leave", preludeSrc+leaveSrc)
	nudgeScript   = core.NewScript("nudge", preludeSrc+nudgeSrc)
	inspectScript = core.NewScript("inspect", preludeSrc+inspectSrc)
	labelScript   = core.NewScript("label", labelSrc)
)

// hint is what the per-key path knows of an obtain or a pass.
type hint struct {
	// free: lk is expected free. A store may then try a cheaper command
	// first, and obtain as usual only if that fails.
	free bool
	// waits: the caller waits for the lock if this attempt fails (Lock,
	// Acquire), rather than giving up (TryLock, TryAcquire). Only a
	// waiting caller is queued.
	waits bool
	// waiter is the lock instance's id in the wait queue: registry id "/"
	// instance number.
	waiter string
	// deaf: the waiter hears no release message (a PubSubLock instance
	// that is no longer the cached one): it queues as a poller.
	deaf bool
	// spread is the jitter taken off a full poll interval when the
	// caller sleeps one (lua/prelude.lua, pause).
	spread time.Duration
	// rtt is the instance's last round trip to the server: a poller's next
	// try reaches it that long after its sleep.
	rtt time.Duration
	// queued: the instance's entry is in the wait queue, as far as it
	// knows (a semaphore's attempt then skips testing the queue for
	// being empty).
	queued bool
}

// scripts builds the KEYS and ARGV of each script for a registry: its key
// layout, its fencing, and the arguments that never change, converted to
// interfaces once. Every script that touches the queue takes the same keys
// (lockKeys: the lock key, the queue's four, and for obtain and pass the
// fence counter); flags travel in ARGV.
type scripts struct {
	layout  wire.Layout
	fencing bool

	ttl                                time.Duration
	ttlArg, idleArg, fenceArg, modeArg any
	windowArg, aheadArg, slackArg      any
}

func newScripts(layout wire.Layout, cfg config) scripts {
	mode := 1 // polls
	if cfg.lockType == PubSubLock {
		mode = 2 // woken by the release message
	}
	fence := 0
	if cfg.fencing {
		fence = 1
	}
	return scripts{
		layout:    layout,
		fencing:   cfg.fencing,
		ttl:       cfg.expireAfter,
		ttlArg:    cfg.expireAfter.Milliseconds(),
		idleArg:   max(1, cfg.idle.Milliseconds()),
		fenceArg:  fence,
		modeArg:   mode,
		windowArg: max(1, cfg.turnWindow.Milliseconds()),
		aheadArg:  cfg.pollAhead.Milliseconds(),
		slackArg:  cfg.pollSlack.Milliseconds(),
	}
}

// ttlOf returns ttl in milliseconds as a script argument.
func (s *scripts) ttlOf(ttl time.Duration) any {
	if ttl == s.ttl {
		return s.ttlArg
	}
	return ttl.Milliseconds()
}

// sideNames are the names of lockKeys' side keys, in order: the queue's,
// then the fence counter (obtain and pass only).
var sideNames = [...]string{"queue", "waiters", "turn", "polls", "fence"}

// lockKeys returns the keys of obtain and pass (fence: with the fence
// counter) or of release, leave and nudge: the lock key, the wait queue
// (order and info), the turn and the pollers of the queue (wire.Layout's
// names), and the fence counter. The side keys share one buffer: two
// allocations in all, on the path of every release.
func (s *scripts) lockKeys(lk string, fence bool) []string {
	names := sideNames[:len(sideNames)-1]
	if fence {
		names = sideNames[:]
	}
	var stack [256]byte
	p := s.layout.AppendSidePrefix(stack[:0], lk)
	var b strings.Builder // its String does not copy
	b.Grow(len(names)*len(p) + len("queuewaitersturnpollsfence"))
	keys := make([]string, 1+len(names))
	keys[0] = lk
	var ends [len(sideNames)]int
	for i, name := range names {
		b.Write(p)
		b.WriteString(name)
		ends[i] = b.Len()
	}
	all := b.String()
	start := 0
	for i := range names {
		keys[1+i], start = all[start:ends[i]], ends[i]
	}
	return keys
}

// mode is how the waiter of h waits, as obtain.lua and pass.lua take it.
func (s *scripts) mode(h hint) any {
	switch {
	case !h.waits:
		return 0 // it does not wait: never queued
	case h.deaf:
		return 1 // it polls (small integers convert to interfaces without allocating)
	}
	return s.modeArg
}

// obtain's hint names the waiter (the lock instance) and how it waits; a
// TryLock never queues.
func (s *scripts) obtain(lk, token string, ttl time.Duration, h hint) Call {
	return Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.ttlOf(ttl), h.waiter, s.mode(h), s.idleArg, h.spread.Milliseconds(),
		s.fenceArg, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg, ceilMillis(h.rtt)}}
}

// ceilMillis returns d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// pass's force releases the key even if nobody is in line.
func (s *scripts) pass(lk, token string, ttl time.Duration, h hint, force bool) Call {
	f := 0
	if force {
		f = 1
	}
	return Call{Keys: s.lockKeys(lk, true), Args: []any{token, s.ttlOf(ttl), h.waiter, s.mode(h), s.idleArg, h.spread.Milliseconds(),
		s.fenceArg, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg, f, ceilMillis(h.rtt)}}
}

func (s *scripts) renew(lk, token string, ttl time.Duration) Call {
	return Call{Keys: []string{lk}, Args: []any{token, s.ttlOf(ttl)}}
}

func (s *scripts) release(lk, token string) Call {
	return Call{Keys: s.lockKeys(lk, false), Args: []any{token, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg}}
}

// drop is drop.lua's call: release's for a holder that expects no
// waiter, on the lock key and its queue alone.
func (s *scripts) drop(lk, token string) Call {
	return Call{Keys: []string{lk, s.layout.QueueKey(lk)}, Args: []any{token, s.layout.Channel(lk)}}
}

// nudge gives lk, once expired, to the next waiter (a lease's ReleaseAfter;
// told 1 after a native release, which published one message).
func (s *scripts) nudge(lk, token string, told int) Call {
	return Call{Keys: s.lockKeys(lk, false), Args: []any{token, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg, told}}
}

// leave takes waiter out of lk's wait queue.
func (s *scripts) leave(lk, waiter string) Call {
	return Call{Keys: s.lockKeys(lk, false), Args: []any{waiter, s.layout.Channel(lk), s.windowArg, s.aheadArg, s.slackArg}}
}

// fence raises lk's fence counter to at least n (Redlock).
func (s *scripts) fence(lk string, n int64) Call {
	return Call{Keys: []string{s.layout.FenceKey(lk)}, Args: []any{n}}
}
