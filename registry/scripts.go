package registry

import (
	_ "embed"
	"strings"
	"time"

	"github.com/lockyard/lockyard/internal/wire"
)

// The Lua scripts, one per operation; each file's header lists its KEYS,
// ARGV and reply. Clients run them as EVALSHA, falling back to EVAL on
// NOSCRIPT, so a SCRIPT FLUSH or a restarted server costs one extra command
// and no error.
var (
	//go:embed lua/obtain.lua
	obtainSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/pass.lua
	passSrc string
	//go:embed lua/fence.lua
	fenceSrc string
	//go:embed lua/leave.lua
	leaveSrc string

	obtainScript  = newScript("obtain", obtainSrc)
	releaseScript = newScript("release", releaseSrc)
	renewScript   = newScript("renew", renewSrc)
	passScript    = newScript("pass", passSrc)
	fenceScript   = newScript("fence", fenceSrc)
	leaveScript   = newScript("leave", leaveSrc)
)

// scripts builds the KEYS and ARGV of each script for a registry: its key
// layout, its fencing, and the arguments that never change, converted to
// interfaces once (the registry's TTL, the wait marker's TTL, its id).
type scripts struct {
	layout  wire.Layout
	fencing bool

	pubsub bool // waiters are woken by the release message

	ttl                                        time.Duration
	ttlArg, markerTTLArg, clientIDArg, turnArg any
}

// fairAfter is how long a PubSubLock registry waits for a lock before its
// turn is reserved: a free lock then waits for it (obtain.lua). Below
// that, whoever tries first after a release gets the lock, the quickest
// hand-off; the reservation bounds how long the registry that the server
// notifies last can keep losing.
const fairAfter = 6 * time.Millisecond

func newScripts(layout wire.Layout, cfg config, clientID string) scripts {
	return scripts{
		layout:  layout,
		fencing: cfg.fencing,
		ttl:     cfg.expireAfter,
		ttlArg:  cfg.expireAfter.Milliseconds(),
		// A wait marker lives twice the longest sleep between two attempts
		// of a waiter, so that it lasts while the waiter waits.
		markerTTLArg: max(1, 2*cfg.idle.Milliseconds()),
		clientIDArg:  clientID,
		pubsub:       cfg.lockType == PubSubLock,
		turnArg:      cfg.fairAfter.Milliseconds(),
	}
}

// ttlOf returns ttl in milliseconds as a script argument.
func (s *scripts) ttlOf(ttl time.Duration) any {
	if ttl == s.ttl {
		return s.ttlArg
	}
	return ttl.Milliseconds()
}

// lockKeys returns the keys of obtain.lua and pass.lua: the lock key, the
// wait marker and, with fencing, the fence counter.
func (s *scripts) lockKeys(lk string) []string {
	if s.fencing {
		return []string{lk, s.layout.WaitKey(lk), s.layout.FenceKey(lk)}
	}
	return []string{lk, s.layout.WaitKey(lk)}
}

// obtain's waits says the caller waits if the attempt fails: a waiting
// registry gets its turn reserved (obtain.lua); a TryLock, which may not
// come back, does not.
func (s *scripts) obtain(lk, token string, ttl time.Duration, waits bool) Call {
	kind := 0 // does not wait
	switch {
	case waits && s.pubsub:
		kind = 2 // woken by the release message
	case waits:
		kind = 1 // polls
	}
	return Call{Keys: s.lockKeys(lk), Args: []any{token, s.ttlOf(ttl), s.markerTTLArg, s.clientIDArg, kind, s.turnArg}}
}

func (s *scripts) pass(lk, token string, ttl time.Duration) Call {
	return Call{Keys: s.lockKeys(lk), Args: []any{token, s.ttlOf(ttl), s.layout.Channel(lk), s.clientIDArg}}
}

func (s *scripts) renew(lk, token string, ttl time.Duration) Call {
	return Call{Keys: []string{lk}, Args: []any{token, s.ttlOf(ttl)}}
}

// release names the wait marker too when it lies in lk's Cluster slot:
// always with WithHashTag, and in the default form when lk has no braces
// (a brace in it makes Redis hash only part of it).
func (s *scripts) release(lk, token string) Call {
	args := []any{token, s.layout.Channel(lk)}
	if s.layout.HashTag || !strings.ContainsAny(lk, "{}") {
		return Call{Keys: []string{lk, s.layout.WaitKey(lk)}, Args: args}
	}
	return Call{Keys: []string{lk}, Args: args}
}

// leave takes this registry out of lk's wait marker.
func (s *scripts) leave(lk string) Call {
	return Call{Keys: []string{s.layout.WaitKey(lk)}, Args: []any{s.clientIDArg}}
}

// fence raises lk's fence counter to at least n (Redlock).
func (s *scripts) fence(lk string, n int64) Call {
	return Call{Keys: []string{s.layout.FenceKey(lk)}, Args: []any{n}}
}
