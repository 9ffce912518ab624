package registry

import (
	"context"
	_ "embed"
	"time"

	"github.com/gomodule/redigo/redis"
)

// The Lua scripts, one per operation; each file's header lists its KEYS,
// ARGV and reply. They run as EVALSHA, falling back to EVAL on NOSCRIPT, so
// a SCRIPT FLUSH or a restarted server costs one extra command and no error.
var (
	//go:embed lua/obtain.lua
	obtainSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/pass.lua
	passSrc string

	obtainScript  = newScript(-1, obtainSrc) // 2 or 3 keys: the key count is passed first
	releaseScript = newScript(1, releaseSrc)
	renewScript   = newScript(1, renewSrc)
	passScript    = newScript(-1, passSrc) // 2 or 3 keys, as obtain
)

// script is one Lua script. The embedded redigo Script pipelines it
// (renewal batches); do runs it alone.
type script struct {
	*redis.Script
	keys int // key count; -1: the caller passes it first
	src  string
}

func newScript(keys int, src string) *script {
	return &script{Script: redis.NewScript(keys, src), keys: keys, src: src}
}

// do runs s on c as EVALSHA, then EVAL if the server lacks it, each bounded
// by what is left of timeout. It blocks the calling goroutine in the read,
// unlike redigo's DoContext, which starts a goroutine per command.
func (s *script) do(c redis.Conn, timeout time.Duration, keysAndArgs []any) (any, error) {
	deadline := time.Now().Add(timeout)
	args := make([]any, 0, len(keysAndArgs)+2)
	args = append(args, s.Hash())
	if s.keys >= 0 {
		args = append(args, s.keys)
	}
	args = append(args, keysAndArgs...)
	v, err := doTimeout(c, timeout, "EVALSHA", args)
	if !isNoScript(err) {
		return v, err
	}
	args[0] = s.src
	return doTimeout(c, max(time.Until(deadline), time.Millisecond), "EVAL", args)
}

// doTimeout runs one command bounded by timeout: in the calling goroutine
// when c implements redis.ConnWithTimeout (redigo's connections do),
// otherwise through redis.DoContext.
func doTimeout(c redis.Conn, timeout time.Duration, cmd string, args []any) (any, error) {
	if cwt, ok := c.(redis.ConnWithTimeout); ok {
		return cwt.DoWithTimeout(timeout, cmd, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return redis.DoContext(c, ctx, cmd, args...)
}
