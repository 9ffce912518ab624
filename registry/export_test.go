package registry

import "time"

// Test-only views of internals.

// IsCached reports whether key has a cached lock.
func (r *Registry) IsCached(key string) bool {
	_, ok := r.cache.peek(key)
	return ok
}

// CacheLen returns the number of cached locks.
func (r *Registry) CacheLen() int { return r.cache.len() }

// Waiters returns the number of goroutines queued on l's local mutex.
func (l *RedisLock) Waiters() int { return l.local.Waiters() }

// Phase returns the name of l's lifecycle phase.
func (l *RedisLock) Phase() string { return phase(l.phase.Load()).String() }

// WithFairAfter sets how long a PubSubLock registry waits before its turn
// is reserved (fairAfter).
func WithFairAfter(d time.Duration) Option {
	return func(c *config) error { c.fairAfter = d; return nil }
}
