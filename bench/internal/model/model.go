// Package model has what the benches' models share: an event queue in
// simulated time, and time.Sleep as measured on this machine (a section's
// length in every bench is a time.Sleep).
package model

import (
	"container/heap"
	"sync"
	"time"
)

// Events is a queue of events of type E in simulated time, the earliest
// first, in order of pushing among equals.
type Events[E any] struct {
	h events[E]
	n int // events pushed so far: the order among equal times
}

type event[E any] struct {
	at  time.Duration
	seq int
	e   E
}

type events[E any] []event[E]

func (h events[E]) Len() int { return len(h) }
func (h events[E]) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].seq < h[j].seq
}
func (h events[E]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events[E]) Push(x any)   { *h = append(*h, x.(event[E])) }
func (h *events[E]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// At queues e at simulated time at.
func (q *Events[E]) At(at time.Duration, e E) {
	q.n++
	heap.Push(&q.h, event[E]{at, q.n, e})
}

// Next returns the earliest event and its time; ok false when none is left.
func (q *Events[E]) Next() (at time.Duration, e E, ok bool) {
	if len(q.h) == 0 {
		return 0, e, false
	}
	x := heap.Pop(&q.h).(event[E])
	return x.at, x.e, true
}

// Sleeps measures time.Sleep(d) on this machine, n goroutines at once (as
// the benches' sections run), each k times.
func Sleeps(d time.Duration, n, k int) []time.Duration {
	var (
		mu  sync.Mutex
		out []time.Duration
		wg  sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			for range k {
				t := time.Now()
				time.Sleep(d)
				el := time.Since(t)
				mu.Lock()
				out = append(out, el)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}
