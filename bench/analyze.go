package main

import (
	"math"
	"slices"

	"github.com/lockyard/lockyard/bench/internal/stat"
)

// metrics are one run's figures by column name.
type metrics map[string]float64

const ms = 1e6 // nanoseconds per millisecond

// analyze computes the figures of a run from its acquisitions. goroutines
// and procs are how many took part (for fairness, counting those that got
// nothing).
func analyze(recs []rec, start, end int64, goroutines, procs int) metrics {
	slices.SortFunc(recs, func(a, b rec) int { return int(a.Acq - b.Acq) })
	m := metrics{}
	var inWindow int
	var waits, takeovers, handoffs []float64
	perG := map[[2]int]float64{}
	perProc := make([]float64, procs)
	last := map[string]rec{}
	for i, r := range recs {
		if r.Acq <= end {
			inWindow++
		}
		wait := float64(r.Acq-r.Wait) / ms
		waits = append(waits, wait)
		perG[[2]int{r.Proc, r.G}]++
		perProc[r.Proc]++
		if i > 0 {
			p := recs[i-1]
			if p.Proc != r.Proc || p.G != r.G {
				takeovers = append(takeovers, wait)
			}
			if p.Proc != r.Proc {
				handoffs = append(handoffs, float64(r.Acq-p.Done)/ms)
			}
		}
		if p, ok := last[r.Key]; ok && r.Acq < p.Rel {
			m["violations"]++
		}
		last[r.Key] = r
	}
	m["acq/s"] = float64(inWindow) / (float64(end-start) / 1e9)
	m["wait p50 ms"] = stat.Percentile(waits, 50)
	m["wait p99 ms"] = stat.Percentile(waits, 99)
	m["takeover p99 ms"] = stat.Percentile(takeovers, 99)
	m["takeover %"] = 100 * float64(len(takeovers)) / math.Max(1, float64(len(recs)-1))
	counts := make([]float64, 0, goroutines)
	for _, c := range perG {
		counts = append(counts, c)
	}
	for len(counts) < goroutines {
		counts = append(counts, 0)
	}
	m["jain"] = stat.Jain(counts)
	if procs > 1 {
		m["handoff p50 ms"] = stat.Percentile(handoffs, 50)
		m["min share %"] = 100 * slices.Min(perProc) / math.Max(1, float64(len(recs)))
	}
	m["violations"] += 0
	return m
}

// perAcq adds the traffic figures of a run: per acquisition, round trips
// and commands written by the clients, and calls the server counted
// (commands inside scripts included).
func (m metrics) perAcq(n int, writes, cmds, serverCalls int64) {
	d := math.Max(1, float64(n))
	m["rt/acq"] = float64(writes) / d
	m["cmds/acq"] = float64(cmds) / d
	m["srv calls/acq"] = float64(serverCalls) / d
}
