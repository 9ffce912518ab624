// Command bench compares lockyard with go-redsync/redsync and bsm/redislock
// on a private redis-server: every scenario for every library in the same
// run, interleaved and repeated, printed as medians with ratios. See
// README.md, "Performance", and `make bench`.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

func main() {
	var (
		reps   = flag.Int("reps", 5, "repetitions of every scenario (medians are printed)")
		dur    = flag.Duration("dur", 2*time.Second, "length of a contended run (uncontended runs take half)")
		only   = flag.String("scenarios", "u,r,1,2,3,4,5", "scenarios to run (u: uncontended CPU, r: renewals, interleaved)")
		rounds = flag.Int("cpu-rounds", 40, "scenario u: rounds, each a shuffled burst of every contender")
		burst  = flag.Int("cpu-burst", 400, "scenario u: lock+unlock cycles per burst")
		worker = flag.Bool("worker", false, "internal: run one process of a cross-process scenario (spec on stdin)")
		prof   = flag.String("cpuprofile", "", "write a CPU profile of this process to the file")
		pick   = flag.String("impls", "", "run only the contenders whose names contain one of these, comma-separated")
	)
	flag.Parse()
	if *pick != "" {
		impls = slices.DeleteFunc(impls, func(im impl) bool {
			return !slices.ContainsFunc(strings.Split(*pick, ","), func(s string) bool { return strings.Contains(im.name, s) })
		})
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if *worker {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*reps, *dur, *rounds, *burst, strings.Split(*only, ",")); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func runWorker() error {
	var sp spec
	if err := json.NewDecoder(os.Stdin).Decode(&sp); err != nil {
		return err
	}
	res, err := work(sp)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// table collects each run's metrics by scenario and impl.
type table map[string]map[string][]metrics

func (t table) add(sc, im string, m metrics) {
	if t[sc] == nil {
		t[sc] = map[string][]metrics{}
	}
	t[sc][im] = append(t[sc][im], m)
}

// merge adds the runs of u to t.
func (t table) merge(u table) {
	for sc, ims := range u {
		for im, ms := range ims {
			for _, m := range ms {
				t.add(sc, im, m)
			}
		}
	}
}

// med is the median over runs of one figure.
func (t table) med(sc, im, col string) float64 {
	var xs []float64
	for _, m := range t[sc][im] {
		if v, ok := m[col]; ok {
			xs = append(xs, v)
		}
	}
	return stat.Median(xs)
}

// server is what the lock server has (native commands: the targets of
// scenarios u and r depend on them).
var server redistest.Caps

func run(reps int, dur time.Duration, rounds, burst int, only []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	e := &env{exe: exe}
	args := []string{"--save", "", "--appendonly", "no"}
	if e.lock, err = redistest.Start(args...); err != nil {
		return err
	}
	defer e.lock.Close()
	if e.check, err = redistest.Start(args...); err != nil {
		return err
	}
	defer e.check.Close()
	if server, err = redistest.CapsOf(e.lock.Addr); err != nil {
		return err
	}
	version := server.Name + " " + server.Version
	fmt.Printf("lockyard bench: %d runs of each scenario, interleaved; %s contended, %s uncontended; TTL %s; tuned peers retry every %s\n",
		reps, dur, dur/2, ttl, tunedRetry)
	fmt.Printf("machine: %d CPUs, %s %s/%s; %s on loopback (%s to pick another)\n\n", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, version, redistest.ServerEnv)
	t := table{}
	if slices.Contains(only, "u") {
		fmt.Printf("uncontended CPU: %d rounds of a %d-cycle burst of each contender, shuffled\n\n", rounds, burst)
		if t, err = e.cpuRun(rounds, burst); err != nil {
			return fmt.Errorf("scenario u: %w", err)
		}
	}
	if slices.Contains(only, "r") {
		fmt.Printf("renewal: %d rounds of a %d-renewal burst of each contender, shuffled\n\n", rounds, burst)
		r, err := e.renewRun(rounds, burst)
		if err != nil {
			return fmt.Errorf("scenario r: %w", err)
		}
		t.merge(r)
	}
	for rep := range reps {
		fmt.Fprintf(os.Stderr, "run %d/%d\n", rep+1, reps)
		for _, sc := range scenarios {
			if !slices.Contains(only, sc.id) {
				continue
			}
			d := dur
			if !sc.check {
				d = dur / 2
			}
			for _, im := range impls {
				if !im.in(sc.id) {
					continue
				}
				m, err := e.run(sc, im, d)
				if err != nil {
					return fmt.Errorf("scenario %s, %s: %w", sc.id, im.name, err)
				}
				t.add(sc.id, im.name, m)
			}
		}
		if slices.Contains(only, "1") {
			m, err := e.nested()
			if err != nil {
				return err
			}
			t.add("nested", "lockyard", m)
		}
		if slices.Contains(only, "5") {
			m, err := e.scale()
			if err != nil {
				return err
			}
			t.add("5", "lockyard", m)
		}
	}
	t.print(only)
	return nil
}
