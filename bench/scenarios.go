package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// env is what every run shares: the private servers and the run counter
// that gives each run fresh keys.
type env struct {
	lock, check *redistest.Server
	exe         string
	runs        int
}

// scenario is one load shape. keys(p, g) are the keys goroutine g of
// process p cycles over.
type scenario struct {
	id         string
	title      string
	procs      int
	goroutines int // per process
	keys       func(run, p, g int) []string
	check      bool
	cols       []string
}

var (
	trafficCols = []string{"acq/s", "rt/acq", "cmds/acq", "srv calls/acq"}
	waitCols    = []string{"wait p50 ms", "wait p99 ms", "takeover p99 ms", "takeover %", "jain", "violations"}
)

func oneKey(run, _, _ int) []string { return []string{fmt.Sprintf("r%d:k", run)} }

var scenarios = []scenario{
	{id: "1", title: "uncontended: 1 goroutine, 1 key", procs: 1, goroutines: 1, keys: oneKey, cols: trafficCols},
	{id: "2", title: "same process: 16 goroutines, 1 key", procs: 1, goroutines: 16, keys: oneKey, check: true,
		cols: append(append([]string{}, trafficCols...), waitCols...)},
	{id: "3", title: "cross process: 4 processes x 4 goroutines, 1 key", procs: 4, goroutines: 4, keys: oneKey, check: true,
		cols: append(append([]string{}, trafficCols...), append(waitCols, "handoff p50 ms", "min share %")...)},
	{id: "4", title: "many keys: 64 goroutines x 8 keys each", procs: 1, goroutines: 64, cols: append(append([]string{}, trafficCols...), "violations"),
		keys: func(run, _, g int) []string {
			ks := make([]string, 8)
			for i := range ks {
				ks[i] = fmt.Sprintf("r%d:g%d:k%d", run, g, i)
			}
			return ks
		}},
}

// cpuScenario is the interleaved uncontended CPU scenario (cpu.go), which
// runs apart from the others.
var renewScenario = scenario{id: "r", title: "renewal of a held lock: 1 goroutine, 1 key, per renewal, shuffled bursts",
	cols: []string{"wall us", "client CPU us", "Redis CPU us", "cmd us", "srv calls", "cmd / script", "Redis CPU / script"}}

var cpuScenario = scenario{id: "u", title: "uncontended CPU: 1 goroutine, 1 key, per lock+unlock cycle, shuffled bursts", cols: cpuCols}

// run executes sc for im once and returns its figures.
func (e *env) run(sc scenario, im impl, dur time.Duration) (metrics, error) {
	e.runs++
	slack := 300 * time.Millisecond
	if sc.procs > 1 {
		slack = time.Second // child start-up and warm-up
	}
	start := mono() + int64(slack)
	end := start + int64(dur)
	specs := make([]spec, sc.procs)
	for p := range specs {
		specs[p] = spec{Impl: im.name, Addr: e.lock.Addr, Proc: p, Start: start, End: end}
		if sc.check {
			specs[p].CheckAddr = e.check.Addr
		}
		for g := range sc.goroutines {
			specs[p].Keys = append(specs[p].Keys, sc.keys(e.runs, p, g))
		}
	}
	calls := make(chan int64, 1)
	go func() {
		time.Sleep(time.Duration(start - mono()))
		calls <- serverCalls(e.lock.Addr)
	}()
	results, err := e.runProcs(specs)
	if err != nil {
		return nil, err
	}
	calls0 := <-calls
	calls1 := serverCalls(e.lock.Addr)
	var all result
	for _, r := range results {
		all.Recs = append(all.Recs, r.Recs...)
		all.Writes += r.Writes
		all.Cmds += r.Cmds
		all.Errors += r.Errors
		if all.FirstErr == "" {
			all.FirstErr = r.FirstErr
		}
	}
	if all.Errors > 0 {
		fmt.Fprintf(os.Stderr, "  %s / %s: %d errors, first: %s\n", sc.id, im.name, all.Errors, all.FirstErr)
	}
	m := analyze(all.Recs, start, end, sc.procs*sc.goroutines, sc.procs)
	m.perAcq(len(all.Recs), all.Writes, all.Cmds, calls1-calls0)
	m["errors"] = float64(all.Errors)
	if sc.check {
		m["violations"] += e.checkCounters(all.Recs)
	}
	return m, nil
}

// runProcs runs one spec in this process, or several in child processes.
func (e *env) runProcs(specs []spec) ([]result, error) {
	if len(specs) == 1 {
		r, err := work(specs[0])
		return []result{r}, err
	}
	results := make([]result, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.child(sp)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

// child runs sp in a new process of this program (-worker).
func (e *env) child(sp spec) (result, error) {
	in, err := json.Marshal(sp)
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(e.exe, "-worker")
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("worker %d: %w", sp.Proc, err)
	}
	var r result
	err = json.Unmarshal(out, &r)
	return r, err
}

// checkCounters compares each key's non-atomic counter on the check server
// with the acquisitions of that key; each difference is a lost update, that
// is, a mutual-exclusion violation.
func (e *env) checkCounters(recs []rec) float64 {
	want := map[string]int{}
	for _, r := range recs {
		want[r.Key]++
	}
	var bad float64
	for k, n := range want {
		got, err := redigo.Int(e.check.Do("GET", k))
		if err != nil || got != n {
			fmt.Fprintf(os.Stderr, "  counter %s = %d (err %v), acquisitions %d\n", k, got, err, n)
			bad++
		}
	}
	return bad
}

// serverCalls sums the calls of INFO commandstats, commands run inside
// scripts included, INFO itself excluded.
func serverCalls(addr string) int64 {
	c, err := redigo.Dial("tcp", addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	return serverCallsOn(c)
}

// serverCallsOn is serverCalls on an open connection.
func serverCallsOn(c redigo.Conn) int64 {
	return redistest.CommandCalls(c, func(name string) bool { return name != "info" })
}
