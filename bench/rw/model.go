package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lockyard/lockyard/bench/internal/model"
	"github.com/lockyard/lockyard/bench/internal/stat"
)

// The mix scenario's ceiling (-model): the bench's loop (16 goroutines,
// each taking its next section as soon as it released the last, 10% of
// them writes) played out in simulated time on a lock that
// costs nothing but a hand-over h, with sections drawn from time.Sleep of
// the section length as measured on this machine. It puts a number on
// what an order of serving allows before Redis, the network or lockyard
// cost anything, against the same mutex:
//
//   - mutex: one holder at a time, first come first served;
//   - line: lockyard's RWLock order: readers at the front of the line
//     enter together, a writer once nobody holds, a waiting writer holds up
//     the readers behind it, and a reader that comes while readers hold and
//     no writer waits enters at once;
//   - phase-fair: when a writer leaves, every waiting reader enters,
//     whether or not a writer waits ahead of it; writers in turn.
//
// A section that enters from the line starts h after the release that
// let it in; one that enters at once starts at once.

// modelOrders are the orders modelled, the mutex first.
var modelOrders = []string{"mutex", "line", "phase-fair"}

// modelEnd is a section's end.
type modelEnd struct {
	g     int
	write bool
}

// modelWaiter is a goroutine in line.
type modelWaiter struct {
	g     int
	write bool
	since time.Duration
}

// simulate plays the mix for dur of simulated time under order, and
// returns the sections completed per second.
func simulate(order string, n int, writes float64, secs []time.Duration, h, dur time.Duration, seed uint64) float64 {
	rnd := rand.New(rand.NewPCG(seed, 1))
	var (
		events    model.Events[modelEnd]
		line      []modelWaiter
		holders   int
		writer    bool
		lastWrite bool // phase-fair: the last phase was a writer's
		done      int
	)
	grant := func(w modelWaiter, now time.Duration) {
		start := now
		if w.since < now {
			start += h // it waited: the release's hand-over
		}
		holders++
		if w.write {
			writer, lastWrite = true, true
		}
		events.At(start+secs[rnd.IntN(len(secs))], modelEnd{g: w.g, write: w.write})
	}
	readersIn := func(now time.Duration) {
		rest := line[:0]
		for _, w := range line {
			if w.write {
				rest = append(rest, w)
			} else {
				grant(w, now)
			}
		}
		line = rest
		lastWrite = false
	}
	waitingWriter := func() bool {
		return slices.ContainsFunc(line, func(w modelWaiter) bool { return w.write })
	}
	admit := func(now time.Duration) {
		if writer {
			return
		}
		switch order {
		case "mutex":
			if holders == 0 && len(line) > 0 {
				grant(line[0], now)
				line = line[1:]
			}
		case "line":
			for len(line) > 0 {
				w := line[0]
				if w.write {
					if holders == 0 {
						grant(w, now)
						line = line[1:]
					}
					return
				}
				grant(w, now)
				line = line[1:]
			}
		case "phase-fair":
			switch {
			case holders > 0:
				if !waitingWriter() {
					readersIn(now)
				}
			case len(line) == 0:
			case slices.ContainsFunc(line, func(w modelWaiter) bool { return !w.write }) && (!line[0].write || lastWrite):
				readersIn(now)
			default:
				grant(line[0], now)
				line = line[1:]
			}
		}
	}
	request := func(g int, now time.Duration) {
		line = append(line, modelWaiter{g: g, write: rnd.Float64() < writes, since: now})
		admit(now)
	}
	for g := range n {
		request(g, 0)
	}
	for {
		at, e, ok := events.Next()
		if !ok || at > dur {
			break
		}
		holders--
		if e.write {
			writer = false
		}
		done++
		admit(at)
		request(e.g, at)
	}
	return float64(done) / dur.Seconds()
}

// runModel prints the mix's modelled throughput per order and hand-over,
// and each order's ratio to the mutex at the same hand-over: medians of
// seeds runs of dur simulated time each.
func runModel(seeds int, dur time.Duration) error {
	const sec = 2 * time.Millisecond
	measured := model.Sleeps(sec, 16, 100)
	durs := make([]float64, len(measured))
	for i, d := range measured {
		durs[i] = float64(d.Microseconds()) / 1000
	}
	fmt.Printf("the mix's ceiling by order of serving: 16 goroutines, 10%% writes, %d simulated runs of %v; sections as time.Sleep(%v) measured here (median %.2f ms, p90 %.2f ms) or exactly %v\n\n",
		seeds, dur, sec, stat.Median(durs), stat.Percentile(durs, 90), sec)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintln(w, "| sections\t| hand-over\t| order\t| sections/s\t| / mutex\t|")
	fmt.Fprintln(w, "|---\t|---\t|---\t|---\t|---\t|")
	for _, secs := range []struct {
		name string
		d    []time.Duration
	}{{"exact", []time.Duration{sec}}, {"measured", measured}} {
		for _, h := range []time.Duration{0, 250 * time.Microsecond} {
			var mutex float64
			for _, order := range modelOrders {
				var xs []float64
				for s := range seeds {
					xs = append(xs, simulate(order, 16, 0.1, secs.d, h, dur, uint64(s)+1))
				}
				m := stat.Median(xs)
				if order == "mutex" {
					mutex = m
				}
				fmt.Fprintf(w, "| %s\t| %v\t| %s\t| %.0f\t| %.2f\t|\n", secs.name, h, order, m, m/mutex)
			}
		}
	}
	return w.Flush()
}
