package registry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/lockyard/lockyard/internal/core"
)

// eviction is the registry's check of the server's maxmemory-policy: done
// once it has succeeded (or cannot be made); after a failure, tried again
// at the first obtain after Redis answered one.
type eviction struct {
	done    atomic.Bool // checked, or no INFO to check with
	pending atomic.Bool // a check runs, or failed and waits for Redis to answer
}

// answered records that Redis answered an obtain: a failed check may be
// tried again.
func (e *eviction) answered() {
	if !e.done.Load() {
		e.pending.Store(false)
	}
}

// check warns, once per registry, before its first obtain, when
// the server's maxmemory-policy may evict lock keys: every policy but
// noeviction can, since lock keys carry a TTL and so are volatile too. An
// evicted key is a lost lock that the holder learns of only at its next
// renewal. A check that fails on the network (a server that is down) is
// logged at debug level and tried again once Redis answers an obtain; one
// that the server refuses (INFO denied or renamed) is logged and not tried
// again, and a client without INFO (Redlock) is not checked.
func (e *eviction) check(ctx context.Context, x core.Executor, log *slog.Logger) {
	if e.done.Load() || !e.pending.CompareAndSwap(false, true) {
		return
	}
	info, err := x.Info(ctx, "memory")
	switch {
	case errors.Is(err, core.ErrNoInfo):
		e.done.Store(true)
		return
	case err != nil && !core.IsAmbiguous(err): // INFO denied or renamed: the server said no
		e.done.Store(true)
		log.Debug("lockyard: eviction policy check skipped", "err", err)
		return
	case err != nil:
		log.Debug("lockyard: eviction policy check failed; tried again later", "err", err)
		return
	}
	e.done.Store(true)
	if policy := infoField(info, "maxmemory_policy"); policy != "" && policy != "noeviction" {
		log.Warn("lockyard: the Redis maxmemory-policy can evict lock keys, and an evicted key is a lost lock; use noeviction",
			"maxmemory_policy", policy, "maxmemory", infoField(info, "maxmemory"))
	}
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
