package registry

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
	"github.com/lockyard/lockyard/internal/wire"
)

// Test-only views of internals.

// IsCached reports whether key has a cached lock.
func (r *Registry) IsCached(key string) bool {
	_, ok := r.cache.peek(key)
	return ok
}

// CacheLen returns the number of cached locks.
func (r *Registry) CacheLen() int { return r.cache.len() }

// TurnsSubscribed reports whether the registry's subscription to its
// semaphore turns is taken, and the waiters it may have missed messages
// for were woken.
func (r *Registry) TurnsSubscribed() bool { return r.turns.up.Load() }

// ValidFor returns how long le's hold is valid yet, as r counts it.
func (r *Registry) ValidFor(le *Lease) time.Duration {
	return time.Duration(le.h.Deadline.Load() - r.core.Now())
}

// LoseGrants makes r's turn subscriber drop the next n grant messages, as
// a connection that failed after the server counted it would. Call it
// before r's first semaphore attempt (the subscriber reads it unguarded).
func (r *Registry) LoseGrants(n int32) {
	var left atomic.Int32
	left.Store(n)
	grant := r.turns.grant
	r.turns.grant = func(ch string) {
		if _, ok := r.layout.GrantOfChannel(r.core.ClientID, ch); ok && left.Add(-1) >= 0 {
			return
		}
		grant(ch)
	}
}

// SplitBySlot makes r's AcquireAll take its keys one Cluster slot's group
// at a time, as after a CROSSSLOT reply, on any server.
func (r *Registry) SplitBySlot() { r.multi.cluster.Store(true) }

// Waiters returns the number of goroutines queued on l's local mutex.
func (l *RedisLock) Waiters() int { return l.local.Waiters() }

// Phase returns the name of l's lifecycle phase.
func (l *RedisLock) Phase() string { return phase(l.phase.Load()).String() }

// WithTurns sets a listening waiter's turn (turnWindow) and how soon a
// polling waiter must be due to get one (pollAhead); zero leaves one as it
// is.
func WithTurns(window, ahead time.Duration) Option {
	return func(c *config) error {
		if window > 0 {
			c.turnWindow = window
		}
		if ahead > 0 {
			c.pollAhead = ahead
		}
		return nil
	}
}

// SubscribedKeys returns the lock keys that r's release subscriber has
// subscribed to by channel, and false if it subscribes by pattern.
func SubscribedKeys(r *Registry) ([]string, bool) {
	k := r.subscriber.keys
	if k == nil || !r.subscriber.byKey.Load() {
		return nil, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var lks []string
	for lk := range k.on {
		lks = append(lks, lk)
	}
	slices.Sort(lks)
	return lks, true
}

// KeysAskedFor returns how many keys r's release subscriber by key
// remembers that waiters asked for (none once it subscribes by pattern).
func KeysAskedFor(r *Registry) int {
	k := r.subscriber.keys
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.wanted)
}

// WithCrowdMemory sets how long a lock expects waiters after a release
// found some (crowdMemory): its releases are not quiet meanwhile.
func WithCrowdMemory(d time.Duration) Option {
	return func(c *config) error {
		c.crowdMemory = d
		return nil
	}
}

// WithRuns sets how long after the last command free passes go on
// (freePassSpan) and how long a run of local holds lasts at most
// (chainSpan); zero leaves one as it is.
func WithRuns(freeSpan, chain time.Duration) Option {
	return func(c *config) error {
		if freeSpan > 0 {
			c.freePassSpan = freeSpan
		}
		if chain > 0 {
			c.chainSpan = chain
		}
		return nil
	}
}

// WaiterID returns l's id in its key's wait queue.
func (l *RedisLock) WaiterID() string { return l.waiter.ID() }

//go:embed testdata/rules.lua
var rulesSrc string

var rulesScript = core.NewScript("rules", preludeSrc+rulesSrc)

// RunRule runs one rule of lua/prelude.lua on c with a fixed clock
// (testdata/rules.lua): keys are the queue's order, info and turn keys.
func RunRule(ctx context.Context, c Client, keys []string, args ...any) (any, error) {
	return c.Eval(ctx, rulesScript, keys, args)
}

// HoldLost reports whether l has a hold whose validity has ended (or that
// was found gone), on the registry's clock; it arms no timer.
func (l *RedisLock) HoldLost() bool {
	h := l.hold.Load()
	return h != nil && h.Lost(l.eng.core.Now())
}

// Renewing returns the number of holds the watchdog renews.
func (r *Registry) Renewing() int {
	r.core.Watchdog.Mu.Lock()
	defer r.core.Watchdog.Mu.Unlock()
	return len(r.core.Watchdog.Held)
}

// Waiting returns the number of leases of s's registry that wait for a
// permit.
func (s *Semaphore) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.needers
}

// InheritToldWait leaves s's next head a wait in line, as a head that took
// a permit handed off leaves it: until d from now, for one turn message
// after the waker's current count. That message is then counted, as one
// that came before the next head began to wait.
func (s *Semaphore) InheritToldWait(d time.Duration) {
	s.mu.Lock()
	s.queued = true
	s.mu.Unlock()
	s.turn.waitUntil, s.turn.mark, s.turn.after = s.eng.core.Now()+int64(d), s.wake.Mark(), 1
	s.wake.Signal(1)
}

// ID returns the registry's id (the first part of its tokens and waiter
// ids, and of its turn channels).
func (r *Registry) ID() string { return r.core.ClientID }

// LeaveAs runs the wait queue's leave for waiter on s's key, as a head
// that gives up does for its own entry.
func (s *Semaphore) LeaveAs(ctx context.Context, waiter string) error {
	return s.proto.leave(ctx, s.key, waiter, s.permits)
}

// WithRefusedRetry sets how soon a turn subscriber that the server refused
// asks again (refusedRetry).
func WithRefusedRetry(d time.Duration) Option {
	return func(c *config) error {
		c.refusedRetry = d
		return nil
	}
}

// SemAcquireSource is semacquire.lua as clients run it: after the prelude.
var SemAcquireSource = preludeSrc + semAcquireSrc

// RWAcquireSource is rwacquire.lua as clients run it.
var RWAcquireSource = preludeSrc + rwRulesSrc + rwAcquireSrc

// SemReleaseSource is semrelease.lua as clients run it.
var SemReleaseSource = preludeSrc + semReleaseSrc

// SemPassSource is sempass.lua as clients run it.
var SemPassSource = preludeSrc + semPassSrc

// ObtainSource is obtain.lua as clients run it.
var ObtainSource = preludeSrc + obtainSrc

// Grants (semgrant.go).

// TookThenGranted replays the interleaving of attempt() (took(seq, p)
// done, install not yet) with the turn subscriber's granted(seq).
func TookThenGranted(s *Semaphore) (err error) {
	seq, _, _ := s.grantRecordArg(s.eng.core.Now(), 10*time.Second, 1)
	p := &permit{s: s}
	if s.took(seq, p) {
		return fmt.Errorf("took: granted first")
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("granted panicked: %v", v)
		}
	}()
	s.granted(wire.Grant{Key: s.key, Seq: seq, Permits: s.permits})
	return nil
}

// Granted delivers a grant message for seq to s, as its turn
// subscriber would.
func Granted(s *Semaphore, seq uint64) {
	s.granted(wire.Grant{Key: s.key, Seq: seq, Permits: s.permits})
}

// Spares returns the tokens and TTLs of s's spares.
func Spares(s *Semaphore) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, p := range s.spare {
		h := p.h.Load()
		out = append(out, fmt.Sprintf("%s ttl=%v", h.Token, h.TTL()))
	}
	return out
}

// GotThenGrantedAgain replays a claim that got a number's permit, whose
// hold is then retired (a pass or a release running): it returns the
// permit's token, and again, which delivers the grant message of that
// number. The permit must stay set in Redis: it is the attempt's.
func GotThenGrantedAgain(s *Semaphore) (token string, again func()) {
	seq, token, _ := s.grantRecordArg(s.eng.core.Now(), 10*time.Second, 1)
	p := &permit{s: s}
	s.took(seq, p)
	h := core.NewHold(&s.eng.core, s.key, token, 0, 10*time.Second, s.eng.core.Now()+int64(10*time.Second), p, s.proto)
	p.h.Store(h)
	h.Retire()
	return token, func() { s.granted(wire.Grant{Key: s.key, Seq: seq, Permits: s.permits}) }
}

// Lean scripts for lean_test.go: semacquire.lua ("acquire" for its lean
// refusal, "wait" for its lean wait: the other lean path stays in both runs),
// semrelease.lua ("release"), obtain.lua ("obtain") and release.lua
// ("unlock"), each with its lean path and with the lean
// path skipped, and each at two fixed clocks: LeanNow (ms, with a
// fraction) or, whole, its whole ms (so that a field can equal the clock).
// Each PUBLISH is recorded (RPUSH lean:pubs "CHANNEL MESSAGE") and counts
// as many receivers as the hash lean:heard gives its channel. The code
// after the lean block counts its runs (INCR lean:fell).
const LeanNow = 1_700_000_000_123.456

var leanScripts = func() map[string]*core.Script {
	fix := func(src, usec string, lean bool, marker string) string {
		clock := "{'1700000000', '" + usec + "'}"
		for _, r := range [][2]string{
			{"redis.pcall('TIME')", clock},
			{"redis.call('TIME')", clock},
			{"redis.pcall('PUBLISH', ", "leanPub("},
			{"redis.call('PUBLISH', ", "leanPub("},
		} {
			if !strings.Contains(src, r[0]) && r[0] != "redis.call('TIME')" && r[0] != "redis.call('PUBLISH', " {
				panic("lean scripts: no " + r[0])
			}
			src = strings.ReplaceAll(src, r[0], r[1])
		}
		if strings.Count(src, marker) != 1 {
			panic("lean scripts: no " + marker)
		}
		i := strings.Index(src, marker)
		j := strings.Index(src[i:], "until true\n")
		if j < 0 {
			panic("lean scripts: no end of " + marker)
		}
		j += i + len("until true\n")
		src = src[:j] + "redis.call('INCR', 'lean:fell')\n" + src[j:]
		if !lean {
			src = strings.Replace(src, marker, "repeat do break end", 1)
		}
		return "local function leanPub(ch, msg)\n" +
			"  redis.call('RPUSH', 'lean:pubs', ch .. ' ' .. msg)\n" +
			"  return tonumber(redis.call('HGET', 'lean:heard', ch) or '0')\n" +
			"end\n" + src
	}
	m := map[string]*core.Script{}
	for op, s := range map[string][2]string{
		"acquire": {semAcquireSrc, "repeat -- lean refusal"},
		"wait":    {semAcquireSrc, "repeat -- lean wait"},
		"release": {semReleaseSrc, "repeat -- lean turn"},
		"obtain":  {obtainSrc, "repeat -- lean refusal"},
		"unlock":  {releaseSrc, "repeat -- lean turn"},
	} {
		for _, lean := range []bool{true, false} {
			for whole, usec := range map[bool]string{false: "123456", true: "123000"} {
				m[fmt.Sprint(op, lean, whole)] = core.NewScript("sem"+op, fix(preludeSrc+s[0], usec, lean, s[1]))
			}
		}
	}
	return m
}()

// RunLean runs semacquire.lua (its two lean paths), semrelease.lua, obtain.lua or release.lua
// (op "acquire" or "wait", "release", "obtain" or "unlock") with a fixed clock (whole: LeanNow's whole ms) and its
// publishes recorded, with its lean path or without it.
func RunLean(ctx context.Context, c Client, op string, lean, whole bool, keys []string, args ...any) (any, error) {
	return c.Eval(ctx, leanScripts[fmt.Sprint(op, lean, whole)], keys, args)
}
