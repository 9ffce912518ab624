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

// The random scenario's ceiling (-model): its loop (16 goroutines, each
// locking a random 3 of 12 keys for a section as soon as it released the
// last ones) played out in simulated time, for three ways of waiting, with
// sections drawn from time.Sleep of the section length as measured on this
// machine, and a round trip rtt: a section holds its keys from the script
// that took them until the one that frees them, a section and a round trip
// (the reply on one side, the release on the other). Nothing else costs
// anything: no server time, no client time.
//
//   - retry: ObtainMulti's, a refused caller tries again every interval
//     (plus a round trip);
//   - woken: lockyard's patient waiter, which tries again once every key
//     that kept it out has been released, wake after the release that
//     freed the last of them (the message, the waiter's scheduling, half a
//     round trip);
//   - in order: first come first served among callers that share a key:
//     a caller takes its keys once every one is free and no caller that
//     came before it waits for any of them (no one can be starved), wake
//     after the release;
//   - woken, then in order: lockyard's way, woken for its first patience
//     (100 ms), then in line as in order; callers not in line still take
//     the keys they find free (lockyard keeps a key for a caller in line
//     for 20 ms at a time, gathering; keeping them for good changed none
//     of the figures by more than 1%).
//
// It puts a number on what each way of waiting allows this shape, and so
// on the throughput ratio that the scenario measures.

// multiModelSpec is one way of waiting.
type multiModelSpec struct {
	name  string
	retry time.Duration // retry: the interval; 0 for the others
	order bool          // in order
	wake  time.Duration // woken and in order: from the release to the next try
	// patience: woken, then in order once it has waited this long.
	patience time.Duration
}

// multiEvent is a try of caller g, the release of its keys (end), or the
// end of its patience (queue).
type multiEvent struct {
	g          int
	end, queue bool
	since      time.Duration // queue: the wait it ends
}

// simulateMulti plays the random scenario under way for dur of simulated
// time and returns the acquisitions per second and the smallest
// goroutine's share against the mean.
func simulateMulti(way multiModelSpec, n, nkeys, pick int, secs []time.Duration, rtt, dur time.Duration, seed uint64) (perSec, minShare float64) {
	rnd := rand.New(rand.NewPCG(seed, 2))
	var (
		events  model.Events[multiEvent]
		holder  = make([]int, nkeys) // -1: free
		want    = make([][]int, n)   // each caller's keys
		since   = make([]time.Duration, n)
		waiting = make([]bool, n)
		blocked = make([][]int, n) // woken: the keys that kept it out
		line    []int              // in order: the callers waiting, oldest first
		done    = make([]int, n)
	)
	for k := range holder {
		holder[k] = -1
	}
	free := func(g int) bool {
		return !slices.ContainsFunc(want[g], func(k int) bool { return holder[k] >= 0 })
	}
	take := func(g int, now time.Duration) {
		for _, k := range want[g] {
			holder[k] = g
		}
		waiting[g] = false
		events.At(now+rtt+secs[rnd.IntN(len(secs))], multiEvent{g: g, end: true})
	}
	// admit lets in, in order, the callers in line that may enter now;
	// came is one that just reached the server (-1: none), which needs no
	// wake-up.
	admit := func(now time.Duration, came int) {
		claimed := make([]bool, nkeys)
		rest := line[:0]
		for _, g := range line {
			ok := free(g) && !slices.ContainsFunc(want[g], func(k int) bool { return claimed[k] })
			for _, k := range want[g] {
				claimed[k] = true
			}
			if ok {
				at := now + way.wake // woken by a release
				if g == came {
					at = now
				}
				take(g, at)
			} else {
				rest = append(rest, g)
			}
		}
		line = rest
	}
	begin := func(g int, now time.Duration) {
		want[g] = rnd.Perm(nkeys)[:pick]
		since[g], waiting[g] = now, true
		if way.patience > 0 {
			events.At(now+way.patience, multiEvent{g: g, queue: true, since: now})
		}
		events.At(now+rtt/2, multiEvent{g: g})
	}
	for g := range n {
		begin(g, 0)
	}
	for {
		at, e, ok := events.Next()
		if !ok || at > dur {
			break
		}
		g := e.g
		if e.queue { // its patience is over: it queues, if it still waits
			if waiting[g] && since[g] == e.since && !slices.Contains(line, g) {
				blocked[g] = nil
				line = append(line, g)
				admit(at, -1)
			}
			continue
		}
		if !e.end { // a try reaches the server
			if !waiting[g] || slices.Contains(line, g) {
				continue // a wake-up that came late
			}
			if way.order {
				line = append(line, g)
				admit(at, g)
				continue
			}
			if free(g) {
				take(g, at)
				continue
			}
			if way.retry > 0 {
				events.At(at+way.retry+rtt, multiEvent{g: g})
				continue
			}
			blocked[g] = slices.DeleteFunc(slices.Clone(want[g]), func(k int) bool { return holder[k] < 0 })
			continue
		}
		freed := want[g]
		for _, k := range freed {
			holder[k] = -1
		}
		done[g]++
		if way.order || way.patience > 0 {
			admit(at, -1)
		}
		if !way.order && way.retry == 0 {
			for w := range n {
				if !waiting[w] || len(blocked[w]) == 0 {
					continue
				}
				blocked[w] = slices.DeleteFunc(blocked[w], func(k int) bool { return slices.Contains(freed, k) })
				if len(blocked[w]) == 0 {
					events.At(at+way.wake, multiEvent{g: w})
				}
			}
		}
		begin(g, at+rtt/2)
	}
	total := 0
	for _, d := range done {
		total += d
	}
	mean := float64(total) / float64(n)
	return float64(total) / dur.Seconds(), float64(slices.Min(done)) / mean
}

// multiModelWays are the ways of waiting modelled.
func multiModelWays(retry time.Duration) []multiModelSpec {
	return []multiModelSpec{
		{name: fmt.Sprintf("retry every %v", retry), retry: retry},
		{name: "woken, 0.25 ms", wake: 250 * time.Microsecond},
		{name: "woken, 0.5 ms", wake: 500 * time.Microsecond},
		{name: "woken, 1 ms", wake: time.Millisecond},
		{name: "in order, 0.25 ms", order: true, wake: 250 * time.Microsecond},
		{name: "in order, 0.5 ms", order: true, wake: 500 * time.Microsecond},
		{name: "woken then in order, 0.25 ms", wake: 250 * time.Microsecond, patience: 100 * time.Millisecond},
		{name: "woken then in order, 0.5 ms", wake: 500 * time.Microsecond, patience: 100 * time.Millisecond},
	}
}

// runMultiModel prints the random scenario's modelled throughput for each
// way of waiting, and its ratio to the retrying one: medians of seeds runs
// of dur simulated time each, with exact sections and with sections as
// time.Sleep takes here.
func runMultiModel(retry time.Duration, seeds int, dur time.Duration) error {
	const sec, rtt = 2 * time.Millisecond, 200 * time.Microsecond
	measured := model.Sleeps(sec, 16, 100)
	ms := make([]float64, len(measured))
	for i, d := range measured {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	fmt.Printf("the random scenario's ceiling by way of waiting: 16 goroutines, 3 of 12 keys, round trip %v, %d simulated runs of %v; sections exactly %v, or as time.Sleep(%v) measured here (median %.2f ms, p90 %.2f ms), or that plus 0.4 ms (time.Sleep as the loaded bench measured it)\n\n",
		rtt, seeds, dur, sec, sec, stat.Median(ms), stat.Percentile(ms, 90))
	loaded := make([]time.Duration, len(measured))
	for i, d := range measured {
		loaded[i] = d + 400*time.Microsecond
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 1, ' ', 0)
	fmt.Fprintln(w, "| sections\t| way of waiting\t| acquisitions/s\t| / retry\t| smallest share\t|")
	fmt.Fprintln(w, "|---\t|---\t|---\t|---\t|---\t|")
	for _, secs := range []struct {
		name string
		d    []time.Duration
	}{{"exact", []time.Duration{sec}}, {"measured", measured}, {"measured + 0.4 ms", loaded}} {
		var base float64
		for i, way := range multiModelWays(retry) {
			var xs, shares []float64
			for s := range seeds {
				x, share := simulateMulti(way, 16, 12, 3, secs.d, rtt, dur, uint64(s)+1)
				xs, shares = append(xs, x), append(shares, share)
			}
			m := stat.Median(xs)
			if i == 0 {
				base = m
			}
			fmt.Fprintf(w, "| %s\t| %s\t| %.0f\t| %.2f\t| %.2f\t|\n", secs.name, way.name, m, m/base, stat.Median(shares))
		}
	}
	return w.Flush()
}
