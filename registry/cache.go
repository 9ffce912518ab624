package registry

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// evictFraction: when the cache is full, one eviction pass drops the least
// recently used unheld locks up to capacity/evictFraction of them (at least
// one), so that the scan over the cache is paid once per many insertions.
const evictFraction = 16

// cache holds a registry's locks by key, at most capacity of them. Hits are
// lock-free (sync.Map); insertions and evictions take mu.
type cache struct {
	capacity int
	locks    sync.Map     // key string -> *RedisLock
	size     atomic.Int64 // entries in locks

	// mu serialises insertions and evictions so that the size bound holds.
	mu sync.Mutex
}

// get returns the cached lock for key, touched.
func (c *cache) get(key string) (*RedisLock, bool) {
	v, ok := c.locks.Load(key)
	if !ok {
		return nil, false
	}
	l := v.(*RedisLock)
	l.touch()
	return l, true
}

// peek returns the cached lock for key without touching it.
func (c *cache) peek(key string) (*RedisLock, bool) {
	v, ok := c.locks.Load(key)
	if !ok {
		return nil, false
	}
	return v.(*RedisLock), true
}

// getOrInsert returns the lock for key, adding one made by newLock,
// evicting least recently used unheld locks when the cache is full.
func (c *cache) getOrInsert(key string, newLock func() *RedisLock) (*RedisLock, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.get(key); ok { // lost the race to another Obtain
		return l, nil
	}
	if c.size.Load() >= int64(c.capacity) && c.evictLRU() == 0 {
		return nil, ErrCacheFull
	}
	l := newLock()
	c.locks.Store(key, l)
	c.size.Add(1)
	return l, nil
}

// evictLRU removes up to capacity/evictFraction (at least one) of the least
// recently used locks that nobody holds or waits for, and returns how many it
// removed. mu must be held.
func (c *cache) evictLRU() int {
	type entry struct {
		used int64
		l    *RedisLock
	}
	var idle []entry
	c.each(func(l *RedisLock) {
		if !l.local.Busy() {
			idle = append(idle, entry{l.lastUsed.Load(), l})
		}
	})
	slices.SortFunc(idle, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	n := min(len(idle), max(1, c.capacity/evictFraction))
	removed := 0
	for _, e := range idle[:n] {
		if c.drop(e.l) {
			removed++
		}
	}
	return removed
}

// drop removes l from the cache unless it is held or waited for. A goroutine
// that obtained l before the removal may still lock it: the lock keeps
// working uncached, and Redis, where every acquisition has its own token,
// keeps it exclusive with any instance obtained later.
func (c *cache) drop(l *RedisLock) bool {
	if l.local.Busy() || !c.locks.CompareAndDelete(l.name, l) {
		return false
	}
	c.size.Add(-1)
	return true
}

// expire drops every lock that nobody holds or waits for and that was last
// used at least age before now (registry clock); age < 0 drops every such
// lock.
func (c *cache) expire(now int64, age time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.each(func(l *RedisLock) {
		if age < 0 || now-l.lastUsed.Load() >= int64(age) {
			c.drop(l)
		}
	})
}

// each calls fn for every cached lock.
func (c *cache) each(fn func(*RedisLock)) {
	c.locks.Range(func(_, v any) bool {
		fn(v.(*RedisLock))
		return true
	})
}

// len returns the number of cached locks.
func (c *cache) len() int { return int(c.size.Load()) }
