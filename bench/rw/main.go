// Command rw measures lockyard's RWLock on one private redis-server, each
// process a registry of its own (a replica), the contenders interleaved in
// short alternating runs, medians over the repetitions:
//
//   - writer: 4 processes x 4 goroutines reading back to back (5 ms each,
//     always overlapping) and one process writing every 100 ms (2 ms): the
//     writer's longest wait, and the readers' throughput against the same
//     readers with no writer (readers).
//   - readers: the readers alone: the most readers inside at once, the
//     throughput against the ideal (sections / section length), and the
//     scripts (round trips) and commands per read acquisition.
//   - mix: 90% reads, 10% writes, 2 ms sections, 4 x 4: the RWLock against
//     the same work on one RedisLock, and on a Semaphore of 16 permits (every
//     section takes a permit), Redis CPU per acquisition compared.
//
// With -base REV it also runs lockyard built at that git revision, in the
// same alternation. Run it from bench/: go run ./rw.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/bench/internal/abbuild"
	"github.com/lockyard/lockyard/bench/internal/procs"
	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// spec is one process's job.
type spec struct {
	Addr, Key string
	// Kind: "rw" (an RWLock), "mutex" (every section under one RedisLock),
	// "sem" (every section under one permit of a Semaphore of 16).
	Kind       string
	Inflight   int
	Writes     float64       // the share of sections that write (mix)
	Every      time.Duration // a writer process: one write each Every
	Read       time.Duration // a read section
	Write      time.Duration // a write section
	Dur        time.Duration
	PubSub     bool
	Pfx        string
	WriterOnly bool
}

// report is what a process prints.
type report struct {
	Reads, Writes int
	Spans         [][2]int64 // each read section: start and end, unix µs
	WriteWaits    []float64  // ms
}

// contender is one build of lockyard.
type contender struct{ name, exe string }

func main() {
	var (
		reps   = flag.Int("reps", 5, "repetitions of every scenario per contender, alternating")
		dur    = flag.Duration("dur", 2*time.Second, "length of one run")
		worker = flag.String("worker", "", "internal: run one process (JSON spec)")
		base   = flag.String("base", "", "also run lockyard built at this git revision (A/B)")
		only   = flag.String("scenarios", "writer,readers,mix", "scenarios to run")
		model  = flag.Bool("model", false, "print the mix's ceiling by order of serving (simulated, no Redis) and exit")
		lock   = flag.String("lock", "pubsub", "the registries' lock type: pubsub, spin (polling every 100 ms), or mixed (every other process polls; the writer listens)")
	)
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if *model {
		if err := runModel(5, 30*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "rw:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*reps, *dur, *base, *only, *lock); err != nil {
		fmt.Fprintln(os.Stderr, "rw:", err)
		os.Exit(1)
	}
}

func run(reps int, dur time.Duration, base, only, lock string) error {
	pubsub := lock != "spin"
	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cs := []contender{{"lockyard", self}}
	if base != "" {
		exe, cleanup, err := abbuild.At(base, "./rw")
		if err != nil {
			return fmt.Errorf("building the bench against %s: %w", base, err)
		}
		defer cleanup()
		cs = append(cs, contender{"lockyard @" + base, exe})
	}
	conn, err := redigo.Dial("tcp", srv.Addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	version, _ := redigo.String(conn.Do("INFO", "server"))
	if i := strings.Index(version, "redis_version:"); i >= 0 {
		version = strings.Fields(version[i+len("redis_version:"):])[0]
	}
	fmt.Printf("read-write lock bench: %d reps of %v per scenario and contender, alternating; redis-server %s at %s, lock type %s\n", reps, dur, version, srv.Addr, lock)
	sp := spec{Addr: srv.Addr, Inflight: 4, Dur: dur, PubSub: pubsub}
	type job struct {
		name  string
		procs []spec
	}
	readers := func(kind string, writes float64, sec time.Duration) []spec {
		var ps []spec
		for i := range 4 {
			s := sp
			s.Kind, s.Writes, s.Read, s.Write = kind, writes, sec, sec
			s.PubSub = pubsub && (lock != "mixed" || i%2 == 0)
			ps = append(ps, s)
		}
		return ps
	}
	writer := sp
	writer.Kind, writer.Inflight, writer.Every, writer.Write, writer.WriterOnly = "rw", 1, 100*time.Millisecond, 2*time.Millisecond, true
	jobs := map[string][]job{
		"writer":  {{"readers + writer", append(readers("rw", 0, 5*time.Millisecond), writer)}, {"readers alone", readers("rw", 0, 5*time.Millisecond)}},
		"readers": {{"readers alone", readers("rw", 0, 5*time.Millisecond)}},
		"mix":     {{"RWLock", readers("rw", 0.1, 2*time.Millisecond)}, {"RedisLock", readers("mutex", 0.1, 2*time.Millisecond)}, {"Semaphore(16)", readers("sem", 0.1, 2*time.Millisecond)}},
	}
	for _, sc := range strings.Split(only, ",") {
		names, res, err := procs.Interleave(reps, cs, jobs[sc], func(c contender, j job) string { return c.name + " " + j.name },
			func(rep int, c contender, j job) (result, error) {
				return measure(conn, c.exe, fmt.Sprintf("%s%d-%d", sc, rep, rand.N(1<<30)), j.procs)
			})
		if err != nil {
			return fmt.Errorf("%s, %w", sc, err)
		}
		print(sc, names, res, dur)
	}
	return nil
}

// result is one run of one job.
type result struct {
	readsPerSec, writesPerSec, acqPerSec float64
	most                                 int
	longestWrite, p99Write               float64
	scriptsPerAcq, cmdsPerAcq, cpuPerAcq float64
	scriptsPerRead                       float64
}

// cpuSplit returns the server's user and system CPU time so far, in s.
func cpuSplit(conn redigo.Conn) (user, sys float64) {
	info, _ := redigo.String(conn.Do("INFO", "cpu"))
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_cpu_user:"); ok {
			user, _ = strconv.ParseFloat(v, 64)
		} else if v, ok := strings.CutPrefix(l, "used_cpu_sys:"); ok {
			sys, _ = strconv.ParseFloat(v, 64)
		}
	}
	return user, sys
}

var debug = flag.Bool("debug", false, "print the server calls per acquisition by command, and their server time, of each run")

func measure(conn redigo.Conn, exe, key string, specs []spec) (result, error) {
	s0 := procs.Read(conn)
	st0, _ := redistest.CommandStatsOn(conn)
	acqs := 0
	if *debug {
		u0, s0 := cpuSplit(conn)
		defer func() {
			u1, s1 := cpuSplit(conn)
			if acqs > 0 {
				fmt.Fprintf(os.Stderr, "%s: Redis CPU per acquisition: user %.1fus, sys %.1fus\n", specs[0].Kind, (u1-u0)*1e6/float64(acqs), (s1-s0)*1e6/float64(acqs))
			}
			st1, _ := redistest.CommandStatsOn(conn)
			names := make([]string, 0, len(st1))
			for n := range st1 {
				names = append(names, n)
			}
			slices.Sort(names)
			fmt.Fprintf(os.Stderr, "%s:", specs[0].Kind)
			for _, n := range names {
				c := st1[n]
				if d := c.Calls - st0[n].Calls; d > 0 && acqs > 0 {
					fmt.Fprintf(os.Stderr, " %s %.2f (%.1fus)", n, float64(d)/float64(acqs), (c.Usec-st0[n].Usec)/float64(acqs))
				}
			}
			fmt.Fprintln(os.Stderr)
		}()
	}
	for i := range specs {
		specs[i].Key, specs[i].Pfx = key, "bench-"+key
	}
	reps, err := procs.Run[spec, report](exe, specs)
	if err != nil {
		return result{}, err
	}
	var (
		reads, writes int
		spans         [][2]int64
		waits         []float64
		dur           time.Duration
	)
	for i, r := range reps {
		reads, writes = reads+r.Reads, writes+r.Writes
		spans = append(spans, r.Spans...)
		waits = append(waits, r.WriteWaits...)
		dur = specs[i].Dur
	}
	acq := reads + writes
	acqs = acq
	if acq == 0 {
		return result{}, fmt.Errorf("no acquisition")
	}
	srv := procs.Read(conn).Since(s0)
	calls, scripts := srv.Calls, srv.Scripts
	r := result{
		readsPerSec:    float64(reads) / dur.Seconds(),
		writesPerSec:   float64(writes) / dur.Seconds(),
		acqPerSec:      float64(acq) / dur.Seconds(),
		most:           mostAtOnce(spans),
		scriptsPerAcq:  float64(scripts) / float64(acq),
		cmdsPerAcq:     float64(calls) / float64(acq),
		cpuPerAcq:      float64(srv.CPU.Microseconds()) / float64(acq),
		scriptsPerRead: float64(scripts) / float64(max(reads, 1)),
	}
	if len(waits) > 0 {
		r.longestWrite, r.p99Write = slices.Max(waits), stat.Percentile(waits, 99)
	}
	return r, nil
}

// mostAtOnce returns the most read sections that overlapped.
func mostAtOnce(spans [][2]int64) int {
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(spans))
	for _, s := range spans {
		evs = append(evs, ev{s[0], 1}, ev{s[1], -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if a.t != b.t {
			return int(a.t - b.t)
		}
		return a.d - b.d // an end before a start at the same µs
	})
	most, n := 0, 0
	for _, e := range evs {
		n += e.d
		most = max(most, n)
	}
	return most
}

func print(sc string, names []string, res procs.Results[result], dur time.Duration) {
	fmt.Printf("\n#### %s (medians)\n\n", sc)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| job\t reads/s\t writes/s\t most readers at once\t writer's longest wait ms\t writer p99 ms\t scripts/acq\t scripts/read\t commands/acq\t Redis CPU µs/acq\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	med := res.Median
	for _, n := range names {
		fmt.Fprintf(tw, "| %s\t %.0f\t %.0f\t %.0f\t %.1f\t %.1f\t %.3f\t %.3f\t %.2f\t %.1f\t\n", n,
			med(n, func(r result) float64 { return r.readsPerSec }), med(n, func(r result) float64 { return r.writesPerSec }),
			med(n, func(r result) float64 { return float64(r.most) }), med(n, func(r result) float64 { return r.longestWrite }),
			med(n, func(r result) float64 { return r.p99Write }), med(n, func(r result) float64 { return r.scriptsPerAcq }),
			med(n, func(r result) float64 { return r.scriptsPerRead }), med(n, func(r result) float64 { return r.cmdsPerAcq }),
			med(n, func(r result) float64 { return r.cpuPerAcq }))
	}
	_ = tw.Flush()
	ratio := res.Ratio
	switch sc {
	case "writer":
		ratio("lockyard readers + writer", "lockyard readers alone", func(r result) float64 { return r.readsPerSec }, "readers' throughput beside the writer")
	case "readers":
		ideal := 16 / (5 * time.Millisecond).Seconds()
		fmt.Printf("- throughput / ideal (16 readers x 1 / 5 ms = %.0f/s): %.2f\n", ideal, med("lockyard readers alone", func(r result) float64 { return r.readsPerSec })/ideal)
	case "mix":
		ratio("lockyard RWLock", "lockyard RedisLock", func(r result) float64 { return r.acqPerSec }, "throughput")
		ratio("lockyard RWLock", "lockyard Semaphore(16)", func(r result) float64 { return r.cpuPerAcq }, "Redis CPU per acquisition")
	}
	for _, n := range names {
		if i := strings.Index(n, " @"); i < 0 {
			continue
		} else if j := strings.Index(n[i+2:], " "); j >= 0 {
			this := "lockyard" + n[i+2+j:]
			ratio(this, n, func(r result) float64 { return r.acqPerSec }, "throughput against the base")
			ratio(this, n, func(r result) float64 { return r.cpuPerAcq }, "Redis CPU per acquisition against the base")
		}
	}
}

// runWorker runs one process: readers (and writers, by share), or one
// writer every Every, for Dur, on one registry.
func runWorker(js string) error {
	var sp spec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		return err
	}
	pool := &redigo.Pool{MaxIdle: sp.Inflight + 2, Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", sp.Addr) }}
	defer pool.Close()
	lt := registry.SpinLock
	if sp.PubSub {
		lt = registry.PubSubLock
	}
	reg, err := registry.New(pool, sp.Pfx, registry.WithLockType(lt), registry.WithAutoRenew())
	if err != nil {
		return err
	}
	defer reg.Close()
	ctx := context.Background()
	var take func(write bool) (func() error, error)
	switch sp.Kind {
	case "rw":
		l, err := reg.RWLock(sp.Key)
		if err != nil {
			return err
		}
		take = func(write bool) (func() error, error) {
			acquire := l.AcquireRead
			if write {
				acquire = l.AcquireWrite
			}
			le, err := acquire(ctx, 0)
			if err != nil {
				return nil, err
			}
			return func() error { return le.Release(ctx) }, nil
		}
	case "mutex":
		take = func(bool) (func() error, error) {
			le, err := reg.Acquire(ctx, sp.Key, 0)
			if err != nil {
				return nil, err
			}
			return func() error { return le.Release(ctx) }, nil
		}
	case "sem":
		s, err := reg.Semaphore(sp.Key, 16)
		if err != nil {
			return err
		}
		take = func(bool) (func() error, error) {
			le, err := s.Acquire(ctx, 0)
			if err != nil {
				return nil, err
			}
			return func() error { return le.Release(ctx) }, nil
		}
	default:
		return fmt.Errorf("kind %q", sp.Kind)
	}
	var (
		mu    sync.Mutex
		rep   report
		wg    sync.WaitGroup
		first error
	)
	end := time.Now().Add(sp.Dur)
	for range sp.Inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				write := sp.WriterOnly || rand.Float64() < sp.Writes
				if sp.WriterOnly {
					time.Sleep(sp.Every)
				}
				t0 := time.Now()
				release, err := take(write)
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				got := time.Now()
				sec := sp.Read
				if write {
					sec = sp.Write
				}
				time.Sleep(sec)
				left := time.Now()
				if err := release(); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				mu.Lock()
				if write {
					rep.Writes++
					if sp.WriterOnly {
						rep.WriteWaits = append(rep.WriteWaits, float64(got.Sub(t0).Microseconds())/1000)
					}
				} else {
					rep.Reads++
					rep.Spans = append(rep.Spans, [2]int64{got.UnixMicro(), left.UnixMicro()})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}
