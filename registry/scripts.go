package registry

import (
	_ "embed"

	"github.com/gomodule/redigo/redis"
)

// The Lua scripts, one per operation; each file's header lists its KEYS,
// ARGV and reply. They run as EVALSHA, falling back to EVAL on NOSCRIPT
// (redigo's Script.DoContext), so a SCRIPT FLUSH or a restarted server costs
// one extra command and no error.
var (
	//go:embed lua/obtain.lua
	obtainSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/renew.lua
	renewSrc string

	obtainScript  = redis.NewScript(-1, obtainSrc) // 1 or 2 keys: the key count is passed first
	releaseScript = redis.NewScript(1, releaseSrc)
	renewScript   = redis.NewScript(1, renewSrc)
)
