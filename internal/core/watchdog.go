package core

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// renewBatchSize bounds how many renewals go in one pipelined flush: 10 000
// held locks cost two round trips per renewal period.
const renewBatchSize = 5000

// watchdog renews the holds of a registry made WithAutoRenew. One
// goroutine, started by the first hold, renews each hold every third of its
// own TTL, until Close. It wakes when the earliest hold is due and renews,
// in pipelined batches, every hold due by then or within half its period:
// holds of similar TTLs fall into step, so that 10 000 holds with TTLs
// spread over 1s to 60s cost a few round trips a second, not one a lock.
// Without WithAutoRenew it tracks nothing.
type watchdog struct {
	r       *Core
	enabled bool
	started atomic.Bool
	wake    chan struct{} // buffered: a hold due before the planned wake-up was tracked

	// Mu guards the following.
	Mu   sync.Mutex
	Held map[*Hold]int64 // the holds to renew, and when each is due (registry clock)
	plan int64           // registry clock of the planned wake-up
}

func NewWatchdog(r *Core, enabled bool) watchdog {
	return watchdog{r: r, enabled: enabled, wake: make(chan struct{}, 1),
		Held: make(map[*Hold]int64), plan: math.MaxInt64}
}

// period is how often h is renewed: a third of its TTL.
func period(h *Hold) int64 { return h.ttl.Load() / 3 }

// Track records h, a new hold, due a period from now, and starts the
// watchdog on first use, or wakes it if h is due before its plan.
func (w *watchdog) Track(h *Hold) {
	if !w.enabled {
		return
	}
	next := w.r.Now() + period(h)
	w.Mu.Lock()
	w.Held[h] = next
	early := next < w.plan
	w.Mu.Unlock()
	w.r.BG.StartOnce(&w.started, w.loop)
	if early {
		w.signal()
	}
	if w.r.BG.IsClosed() { // Close ran meanwhile: see orphanAll
		h.orphan(errRenewalsStopped)
	}
}

// retimed reschedules h after its TTL changed (RenewLockFor): due a period
// of the new TTL from now.
func (w *watchdog) retimed(h *Hold) {
	if !w.enabled {
		return
	}
	next := w.r.Now() + period(h)
	w.Mu.Lock()
	_, ok := w.Held[h]
	early := ok && next < w.plan
	if ok {
		w.Held[h] = next
	}
	w.Mu.Unlock()
	if early {
		w.signal()
	}
}

// signal wakes the loop to plan again, without blocking.
func (w *watchdog) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// untrack forgets h.
func (w *watchdog) untrack(h *Hold) {
	if !w.enabled {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	delete(w.Held, h)
}

// loop renews what is due, then sleeps until the next hold is due, a
// track wakes it, or Close.
func (w *watchdog) loop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		batch, wait := w.due()
		start := time.Now()
		for len(batch) > 0 {
			n := min(len(batch), renewBatchSize)
			w.Renew(batch[:n])
			batch = batch[n:]
		}
		t.Reset(max(wait-time.Since(start), 0)) // the renewals' own time counts
		select {
		case <-w.r.BG.Closed:
			return
		case <-t.C:
		case <-w.wake:
		}
	}
}

// due returns the holds to renew now (due, or due within half their
// period), with their next renewal set a period from now, and how long
// until the next hold is due; it records that as the plan.
func (w *watchdog) due() ([]*Hold, time.Duration) {
	now := w.r.Now()
	w.Mu.Lock()
	defer w.Mu.Unlock()
	var batch []*Hold
	next := int64(math.MaxInt64)
	for h, due := range w.Held {
		p := period(h)
		if due-p/2 <= now {
			batch = append(batch, h)
			due = now + p
			w.Held[h] = due
		}
		next = min(next, due)
	}
	w.plan = next
	if next == math.MaxInt64 {
		return batch, time.Hour // idle until a track wakes it
	}
	return batch, time.Duration(max(next-now, 0))
}

// errRenewalsStopped ends the watch context of an auto-renewed hold when
// its registry is closed: nothing renews it any more, so it will be lost at
// its deadline. It matches both ErrClosed and ErrLockLost.
var errRenewalsStopped error = renewalsStopped{}

type renewalsStopped struct{}

func (renewalsStopped) Error() string {
	return "lockyard: registry closed: the lock is no longer renewed and will be lost"
}

func (renewalsStopped) Is(target error) bool { return target == ErrClosed || target == ErrLockLost }

// OrphanAll tells every hold the watchdog renews that it renews them no more
// (Close): their Lost channels close, and ExecuteLocked's fn sees its context
// end with errRenewalsStopped, instead of a TTL later.
func (w *watchdog) OrphanAll() {
	if !w.enabled {
		return
	}
	w.Mu.Lock()
	defer w.Mu.Unlock()
	for h := range w.Held {
		h.orphan(errRenewalsStopped)
	}
}
