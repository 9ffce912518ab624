package registry

import (
	_ "embed"
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

	obtainScript  = newScript("obtain", obtainSrc)
	releaseScript = newScript("release", releaseSrc)
	renewScript   = newScript("renew", renewSrc)
	passScript    = newScript("pass", passSrc)
)
