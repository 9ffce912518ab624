package core

import (
	"strconv"
	"sync/atomic"
)

// Waiter is the id under which one instance of a lock kind waits in a
// key's wait queue: its registry's id, "/", and a number unique in the
// registry. The instance's waiting goroutines share it, one at a time
// (the head of its local queue), and it keeps its place while they wait.
// The zero value has no id: Renew gives it its first.
//
// A waiter that stops waiting leaves the queue in the background, and its
// next wait takes a new number (Renew): a leave still in flight when a
// goroutine of the instance queues again then removes the old entry alone,
// never the new one. With one id for ever, such a stale leave took out the
// new entry, and a semaphore's waiter, woken only by its turn message,
// slept a whole poll for a free permit (issue 37).
type Waiter struct {
	id atomic.Pointer[string]
}

// Renew gives w a new id of c's registry, and returns the one it had ("":
// none), which the caller takes out of line. Safe for concurrent use.
func (w *Waiter) Renew(c *Core) string {
	id := c.ClientID + "/" + strconv.FormatUint(c.instances.Add(1), 10)
	if old := w.id.Swap(&id); old != nil {
		return *old
	}
	return ""
}

// ID returns the current id. Safe for concurrent use.
func (w *Waiter) ID() string { return *w.id.Load() }
