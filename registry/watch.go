package registry

import (
	"sync"
	"sync/atomic"

	"github.com/lockyard/lockyard/internal/core"
)

// watchers are the waiters that wait on several keys at once (AcquireAll),
// and so are no cached instance of any: the release subscriber wakes them
// with the cached instance of the key that a message names (deliver), and
// all of them when messages may have been lost (wakeAll). Part of the
// engine: a kind that waits on many keys registers its waker here for as
// long as it waits.
type watchers struct {
	n  atomic.Int32 // how many are registered: deliver skips the lock when none
	mu sync.Mutex
	by map[string][]signaler // user key -> what waits on it
}

// signaler counts the messages of one key for a waiter (core.Waker, or a
// kind's own count that wakes one).
type signaler interface{ Signal(k int64) }

// add registers ss[i] for the messages of names[i], until remove.
func (ws *watchers) add(names []string, ss []signaler) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.by == nil {
		ws.by = make(map[string][]signaler)
	}
	for i, k := range names {
		ws.by[k] = append(ws.by[k], ss[i])
	}
	ws.n.Add(1)
}

// remove undoes add.
func (ws *watchers) remove(names []string, ss []signaler) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for j, k := range names {
		w := ss[j]
		list := ws.by[k]
		for i, x := range list {
			if x == w {
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(ws.by, k)
		} else {
			ws.by[k] = list
		}
	}
	ws.n.Add(-1)
}

// signal counts k messages for the waiters on name.
func (ws *watchers) signal(name string, k int64) {
	if ws.n.Load() == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.by[name] {
		w.Signal(k)
	}
}

// all wakes every registered waiter.
func (ws *watchers) all() {
	if ws.n.Load() == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, list := range ws.by {
		for _, w := range list {
			w.Signal(core.EveryTurn)
		}
	}
}
