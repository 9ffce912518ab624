package registry

import (
	"cmp"
	"slices"
	"time"
)

// evictFraction: when the cache is full, one eviction pass drops the least
// recently used unheld locks up to capacity/evictFraction of them (at least
// one), so that the scan over the cache is paid once per many insertions.
const evictFraction = 16

// insert adds a lock for key, evicting least recently used unheld locks when
// the cache is full.
func (r *Registry) insert(key string) (*RedisLock, error) {
	r.insertMu.Lock()
	defer r.insertMu.Unlock()
	if v, ok := r.locks.Load(key); ok { // lost the race to another Obtain
		l := v.(*RedisLock)
		l.touch()
		return l, nil
	}
	if r.size.Load() >= int64(r.cfg.capacity) && r.evictLRU() == 0 {
		return nil, ErrCacheFull
	}
	l := newRedisLock(r, key)
	r.locks.Store(key, l)
	r.size.Add(1)
	return l, nil
}

// evictLRU removes up to capacity/evictFraction (at least one) of the least
// recently used locks that nobody holds or waits for, and returns how many it
// removed. insertMu must be held.
func (r *Registry) evictLRU() int {
	type entry struct {
		used int64
		l    *RedisLock
	}
	var idle []entry
	r.locks.Range(func(_, v any) bool {
		l := v.(*RedisLock)
		if !l.local.Busy() {
			idle = append(idle, entry{l.lastUsed.Load(), l})
		}
		return true
	})
	slices.SortFunc(idle, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	n := min(len(idle), max(1, r.cfg.capacity/evictFraction))
	removed := 0
	for _, e := range idle[:n] {
		if r.drop(e.l) {
			removed++
		}
	}
	return removed
}

// drop removes l from the cache unless it is held or waited for. A goroutine
// that obtained l before the removal may still lock it: the lock keeps
// working uncached, and Redis, where every acquisition has its own token,
// keeps it exclusive with any instance obtained later.
func (r *Registry) drop(l *RedisLock) bool {
	if l.local.Busy() || !r.locks.CompareAndDelete(l.userKey(), l) {
		return false
	}
	r.size.Add(-1)
	return true
}

// ExpireUnusedOlderThan removes from the cache every lock that nobody holds
// or waits for and that was last obtained, locked or unlocked at least age
// ago; a negative age removes every such lock. It never touches Redis.
func (r *Registry) ExpireUnusedOlderThan(age time.Duration) {
	r.insertMu.Lock()
	defer r.insertMu.Unlock()
	now := r.now()
	r.locks.Range(func(_, v any) bool {
		l := v.(*RedisLock)
		if age < 0 || now-l.lastUsed.Load() >= int64(age) {
			r.drop(l)
		}
		return true
	})
}
