package core

import (
	"sync/atomic"
	"time"
)

// Crowd is whether a lock instance expects waiters in line for its key:
// what decides between a quiet release (plain commands, or a script that
// gives no turn, one round trip when nobody waits and two when someone
// does) and one that gives the turn at once. Its kinds' releases and
// attempts report what they found (Found); a release asks Quiet.
//
// A key that waiters come to now and then (four registries a few ms
// apart) found them at 60% of its quiet releases when only the last
// release counted, each such release paying a second round trip: a Crowd
// remembers finding waiters for a while (the memory Quiet is given). The
// zero value expects none. Safe for concurrent use.
type Crowd struct {
	crowded atomic.Bool
	at      atomic.Int64 // when (Core clock) waiters were last found; 0: never
}

// Found records what a release or an attempt found at now: waiters in
// line (others), or none.
func (c *Crowd) Found(others bool, now int64) {
	c.crowded.Store(others)
	if others {
		c.at.Store(max(now, 1))
	}
}

// Quiet reports whether the instance expects nobody in line at now: the
// last report found nobody, and none found anyone within memory.
func (c *Crowd) Quiet(now int64, memory time.Duration) bool {
	at := c.at.Load()
	return !c.crowded.Load() && (at == 0 || now-at >= int64(memory))
}
