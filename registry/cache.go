package registry

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// evictFraction: when the cache is full, one eviction pass drops the least
// recently used unheld entries up to capacity/evictFraction of them (at
// least one), so that the scan over the cache is paid once per many
// insertions.
const evictFraction = 16

// cached is what the cache holds for a key: a RedisLock or a Semaphore.
// One key of a registry is one kind at a time (its Redis key holds a string
// for a lock, a sorted set for a semaphore).
type cached interface {
	// cacheKey returns the key the entry was made for.
	cacheKey() string
	// busy reports whether the entry is held or waited for locally: a busy
	// entry is never evicted.
	busy() bool
	// used returns the registry clock of its last use.
	used() int64
	// signal counts k release messages of its key (the subscriber).
	signal(k int64)
	// kind names the entry's kind ("lock", "semaphore").
	kind() string
	// wokenBy says which messages wake its waiters.
	wokenBy() wakeup
}

// wakeup names the messages that wake the waiters of a cached entry: each
// of the registry's subscribers hears one of them.
type wakeup int

const (
	byRelease wakeup = iota // the key's release messages (a lock's waiters)
	byTurn                  // the registry's own turn messages (a semaphore's)
)

// cache holds a registry's locks and semaphores by key, at most capacity
// of them. Hits are lock-free (sync.Map); insertions and evictions take mu.
type cache struct {
	capacity int
	entries  sync.Map     // key string -> cached
	size     atomic.Int64 // entries in entries

	// mu serialises insertions and evictions so that the size bound holds.
	mu sync.Mutex
}

// peek returns the cached entry for key without touching it.
func (c *cache) peek(key string) (cached, bool) {
	v, ok := c.entries.Load(key)
	if !ok {
		return nil, false
	}
	return v.(cached), true
}

// getOrInsert returns the entry for key, adding one made by newEntry,
// evicting least recently used idle entries when the cache is full.
func (c *cache) getOrInsert(key string, newEntry func() cached) (cached, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.peek(key); ok { // lost the race to another caller
		return e, nil
	}
	if c.size.Load() >= int64(c.capacity) && c.evictLRU() == 0 {
		return nil, ErrCacheFull
	}
	e := newEntry()
	c.entries.Store(key, e)
	c.size.Add(1)
	return e, nil
}

// evictLRU removes up to capacity/evictFraction (at least one) of the least
// recently used entries that nobody holds or waits for, and returns how many
// it removed. mu must be held.
func (c *cache) evictLRU() int {
	type entry struct {
		used int64
		e    cached
	}
	var idle []entry
	c.each(func(e cached) {
		if !e.busy() {
			idle = append(idle, entry{e.used(), e})
		}
	})
	slices.SortFunc(idle, func(a, b entry) int { return cmp.Compare(a.used, b.used) })
	n := min(len(idle), max(1, c.capacity/evictFraction))
	removed := 0
	for _, x := range idle[:n] {
		if c.drop(x.e) {
			removed++
		}
	}
	return removed
}

// drop removes e from the cache unless it is held or waited for. A goroutine
// that obtained e before the removal may still use it: it keeps working
// uncached, and Redis, where every acquisition has its own token, keeps it
// exclusive with any instance obtained later.
func (c *cache) drop(e cached) bool {
	if e.busy() || !c.entries.CompareAndDelete(e.cacheKey(), e) {
		return false
	}
	c.size.Add(-1)
	return true
}

// expire drops every entry that nobody holds or waits for and that was last
// used at least age before now (registry clock); age < 0 drops every such
// entry.
func (c *cache) expire(now int64, age time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.each(func(e cached) {
		if age < 0 || now-e.used() >= int64(age) {
			c.drop(e)
		}
	})
}

// each calls fn for every cached entry.
func (c *cache) each(fn func(cached)) {
	c.entries.Range(func(_, v any) bool {
		fn(v.(cached))
		return true
	})
}

// len returns the number of cached entries.
func (c *cache) len() int { return int(c.size.Load()) }
