package registry

import (
	_ "embed"
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

	obtainScript  = newScript("obtain", obtainSrc)
	releaseScript = newScript("release", releaseSrc)
	renewScript   = newScript("renew", renewSrc)
	passScript    = newScript("pass", passSrc)
	fenceScript   = newScript("fence", fenceSrc)
)

// scripts builds the KEYS and ARGV of each script for a registry: its key
// layout, its fencing, and the arguments that never change, converted to
// interfaces once (the registry's TTL, the wait marker's TTL, its id).
type scripts struct {
	layout  wire.Layout
	fencing bool

	ttl                                         time.Duration
	ttlArg, markerTTLArg, clientIDArg, wokenArg any
}

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
		// Waiters woken by the release message get the lock reserved in
		// their turn (obtain.lua); pollers do not.
		wokenArg: boolArg(cfg.lockType == PubSubLock),
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

func (s *scripts) obtain(lk, token string, ttl time.Duration) Call {
	return Call{Keys: s.lockKeys(lk), Args: []any{token, s.ttlOf(ttl), s.markerTTLArg, s.clientIDArg, s.wokenArg}}
}

func (s *scripts) pass(lk, token string, ttl time.Duration) Call {
	return Call{Keys: s.lockKeys(lk), Args: []any{token, s.ttlOf(ttl), s.layout.Channel(lk), s.clientIDArg}}
}

func (s *scripts) renew(lk, token string, ttl time.Duration) Call {
	return Call{Keys: []string{lk}, Args: []any{token, s.ttlOf(ttl)}}
}

func (s *scripts) release(lk, token string) Call {
	return Call{Keys: []string{lk}, Args: []any{token, s.layout.Channel(lk)}}
}

// fence raises lk's fence counter to at least n (Redlock).
func (s *scripts) fence(lk string, n int64) Call {
	return Call{Keys: []string{s.layout.FenceKey(lk)}, Args: []any{n}}
}

// boolArg is a script's flag argument: 1 or 0.
func boolArg(b bool) any {
	if b {
		return 1
	}
	return 0
}
