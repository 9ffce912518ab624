package redistest

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// Intervals records, per key, when each hold began and ended, to count
// overlapping holds (double grants).
type Intervals struct {
	mu   sync.Mutex
	held map[string][][2]time.Time
}

// Add records a hold of key from from to to.
func (iv *Intervals) Add(key string, from, to time.Time) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.held == nil {
		iv.held = make(map[string][][2]time.Time)
	}
	iv.held[key] = append(iv.held[key], [2]time.Time{from, to})
}

// Overlaps counts pairs of holds of one key that overlap in time.
func (iv *Intervals) Overlaps() int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	n := 0
	for _, list := range iv.held {
		sort.Slice(list, func(i, j int) bool { return list[i][0].Before(list[j][0]) })
		end := time.Time{}
		for _, x := range list {
			if x[0].Before(end) {
				n++
			}
			if x[1].After(end) {
				end = x[1]
			}
		}
	}
	return n
}

// Median returns the median of d (0 for none).
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// Load runs goroutines that repeat a step until halted.
type Load struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// StartLoad starts n goroutines, each calling step(g) until halt, at most
// 1e6 times (every load loop is bounded). The test's cleanup halts it too.
func StartLoad(t testing.TB, n int, step func(g int)) *Load {
	l := &Load{stop: make(chan struct{})}
	for g := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for range 1_000_000 {
				select {
				case <-l.stop:
					return
				default:
				}
				step(g)
			}
		}()
	}
	t.Cleanup(l.Halt)
	return l
}

// Halt stops the goroutines and waits for them; it may be called twice.
func (l *Load) Halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}
