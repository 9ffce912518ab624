package registry

import (
	"context"
	"strings"
	"sync/atomic"
)

// eviction is the registry's one check of the server's maxmemory-policy.
type eviction struct{ checked atomic.Bool }

// checkEviction warns, once per registry, before its first obtain, when
// the server's maxmemory-policy may evict lock keys: every policy but
// noeviction can, since lock keys carry a TTL and so are volatile too. An
// evicted key is a lost lock that the holder learns of only at its next
// renewal. Errors (INFO renamed or denied, a server that is down) are
// logged at debug level and not retried.
func (r *Registry) checkEviction(ctx context.Context) {
	if r.eviction.checked.Load() || !r.eviction.checked.CompareAndSwap(false, true) {
		return
	}
	info, err := r.store.info(ctx, "memory")
	if err != nil {
		if err != errNoInfo {
			r.log.Debug("lockyard: eviction policy check skipped", "err", err)
		}
		return
	}
	if policy := infoField(info, "maxmemory_policy"); policy != "" && policy != "noeviction" {
		r.log.Warn("lockyard: the Redis maxmemory-policy can evict lock keys, and an evicted key is a lost lock; use noeviction",
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
