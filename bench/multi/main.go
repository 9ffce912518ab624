// Command multi measures Registry.AcquireAll on one private redis-server
// against bsm/redislock's ObtainMulti (v0.10.0, which only retries: every
// -peer-retry), each process a client of its own, the contenders
// interleaved in short alternating runs, medians over the repetitions:
//
//   - random: 8 processes x 2 goroutines, each locking a random 3 of 12
//     keys for 2 ms: overlaps (from every section's span, per key), calls
//     that failed or timed out (10 s), throughput, the smallest goroutine's
//     share of the acquisitions against the mean, Redis CPU per acquisition,
//     and the client processes' CPU per acquisition (while they ran).
//   - starve: one goroutine locking 4 keys (1 ms, then 50 ms off), beside 4
//     single-key lockers each keeping one of those keys busy back to back
//     (1 ms sections): the multi-key acquisitions, their longest wait, and
//     the single-key lockers' throughput against the same lockers alone,
//     and beside a single-key waiter that waits the whole run (its registry
//     hears every release message, as the multi-key one's does), and
//     beside 5 such waiters (as many registries that hear every release as
//     the multi-key job has: the 4 lockers' own, once they waited, and the
//     multi-key one's).
//   - uncontended: one goroutine locking 5 free keys and releasing them,
//     back to back: scripts and commands per acquisition (each a round
//     trip), Redis CPU per acquire-release cycle.
//   - cluster (-cluster, lockyard alone): the random job on a 6-node
//     Cluster (3 masters with a replica each), through the go-redis
//     adapter, its 12 keys in several slots on every master: overlaps,
//     failed calls, throughput, the smallest share and the longest wait.
//     ObtainMulti takes no keys across slots (CROSSSLOT).
//
// Run it from bench/: go run ./multi. With -base REV it also runs
// lockyard built at that git revision, in the same alternation (an A/B
// against the parent of a change), and prints this build's ratios to it;
// with -lock spin lockyard's registries are SpinLock, polling every
// -peer-retry, instead of PubSubLock.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bsm/redislock"
	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/bench/internal/abbuild"
	"github.com/lockyard/lockyard/bench/internal/procs"
	"github.com/lockyard/lockyard/bench/internal/stat"
	lygoredis "github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// spec is one process's job.
type spec struct {
	Addr, Pfx string
	// Impl: "lockyard" (AcquireAll; a single-key locker: Acquire) or
	// "redislock" (ObtainMulti; Obtain).
	Impl     string
	Keys     []string // the keys it picks from
	Pick     int      // keys per acquisition (a random Pick of Keys); 0: all of them
	Inflight int
	Hold     time.Duration // the section
	Pause    time.Duration // after each section
	Retry    time.Duration // the peer's retry interval
	Dur      time.Duration
	// Listen: instead, a single-key PubSubLock waiter that waits the whole
	// run for a key that another registry of the process holds: it hears
	// every release message, as any waiting registry does (starve's
	// control).
	Listen bool
	// Spin: lockyard's registries are SpinLock, polling every Retry,
	// instead of PubSubLock.
	Spin bool
	// Cluster: the nodes of a Cluster, which lockyard reaches through the
	// go-redis adapter (Addr unused).
	Cluster []string
}

// report is what a process prints.
type report struct {
	Counts []int                 // acquisitions per goroutine
	Waits  []float64             // ms, each acquisition's
	Spans  map[string][][2]int64 // per key: each section's start and end, unix µs
	Errors int
	CPU    time.Duration // the process's CPU (user and system) while its goroutines ran
}

// contender is one implementation and the name it is reported by.
type contender struct{ name, impl, exe string }

func main() {
	var (
		reps   = flag.Int("reps", 5, "repetitions of every scenario per contender, alternating")
		dur    = flag.Duration("dur", 3*time.Second, "length of one run")
		worker = flag.String("worker", "", "internal: run one process (JSON spec)")
		only   = flag.String("scenarios", "random,starve,uncontended", "scenarios to run")
		retry  = flag.Duration("peer-retry", 10*time.Millisecond, "ObtainMulti's retry interval (LinearBackoff)")
		base   = flag.String("base", "", "also run lockyard built at this git revision (A/B)")
		mdl    = flag.Bool("model", false, "print the random scenario's ceiling by way of waiting (simulated, no Redis) and exit")
		lock   = flag.String("lock", "pubsub", "lockyard's lock type: pubsub, or spin (SpinLock polling every -peer-retry)")
		clu    = flag.Bool("cluster", false, "run the random job on a 6-node Cluster instead, lockyard alone (-reps runs of -dur)")
	)
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if *mdl {
		if err := runMultiModel(*retry, 5, 20*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "multi:", err)
			os.Exit(1)
		}
		return
	}
	if *clu {
		if err := runCluster(*reps, *dur); err != nil {
			fmt.Fprintln(os.Stderr, "multi:", err)
			os.Exit(1)
		}
		return
	}
	if *lock != "pubsub" && *lock != "spin" {
		fmt.Fprintln(os.Stderr, "multi: -lock is pubsub or spin")
		os.Exit(2)
	}
	if err := run(*reps, *dur, *only, *retry, *base, *lock == "spin"); err != nil {
		fmt.Fprintln(os.Stderr, "multi:", err)
		os.Exit(1)
	}
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("k", i)
	}
	return out
}

func run(reps int, dur time.Duration, only string, retry time.Duration, base string, spin bool) error {
	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	self, err := os.Executable()
	if err != nil {
		return err
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
	lockType := "PubSubLock"
	if spin {
		lockType = fmt.Sprintf("SpinLock (polling every %v)", retry)
	}
	fmt.Printf("multi-key bench: %d reps of %v per scenario and contender, alternating; redis-server %s at %s; ObtainMulti retries every %v; lockyard's registries %s\n",
		reps, dur, version, srv.Addr, retry, lockType)
	cs := []contender{{"lockyard", "lockyard", self}, {"ObtainMulti", "redislock", self}}
	if base != "" {
		exe, cleanup, err := abbuild.At(base, "./multi")
		if err != nil {
			return fmt.Errorf("building the bench against %s: %w", base, err)
		}
		defer cleanup()
		cs = append(cs, contender{"lockyard @" + base, "lockyard", exe})
	}
	sp := spec{Addr: srv.Addr, Dur: dur, Retry: retry, Spin: spin}
	type job struct {
		name  string
		procs func(impl string) []spec
	}
	random := func(impl string) []spec { return randomJob(sp, impl) }
	singles := func(impl string) []spec {
		var ps []spec
		for _, k := range keys(4) {
			s := sp
			s.Impl, s.Keys, s.Inflight, s.Hold = impl, []string{k}, 1, time.Millisecond
			ps = append(ps, s)
		}
		return ps
	}
	starve := func(impl string) []spec {
		s := sp
		s.Impl, s.Keys, s.Inflight, s.Hold, s.Pause = impl, keys(4), 1, time.Millisecond, 50*time.Millisecond
		return append(singles(impl), s)
	}
	uncontended := func(impl string) []spec {
		s := sp
		s.Impl, s.Keys, s.Inflight = impl, keys(5), 1
		return []spec{s}
	}
	listener := func(impl string) []spec {
		s := sp
		s.Impl, s.Keys, s.Inflight, s.Listen = impl, []string{"held"}, 1, true
		return append(singles(impl), s)
	}
	listeners := func(impl string) []spec { // as many registries that hear every release as singles + multi has
		ps := singles(impl)
		for i := range 5 {
			s := sp
			s.Impl, s.Keys, s.Inflight, s.Listen = impl, []string{fmt.Sprint("held", i)}, 1, true
			ps = append(ps, s)
		}
		return ps
	}
	jobs := map[string][]job{
		"random":      {{"random 3 of 12", random}},
		"starve":      {{"singles + multi", starve}, {"singles alone", singles}, {"singles + a waiting RedisLock", listener}, {"singles + 5 waiting RedisLocks", listeners}},
		"uncontended": {{"5 keys", uncontended}},
	}
	for _, sc := range strings.Split(only, ",") {
		names, res, err := procs.Interleave(reps, cs, jobs[sc], func(c contender, j job) string { return c.name + " " + j.name },
			func(rep int, c contender, j job) (result, error) {
				return measure(conn, c.exe, fmt.Sprintf("%s%d-%d", sc, rep, rand.N(1<<30)), j.procs(c.impl))
			})
		if err != nil {
			return fmt.Errorf("%s, %w", sc, err)
		}
		print(sc, names, res, base)
	}
	return nil
}

// randomJob is the random job's processes: 8, each of 2 goroutines that
// lock a random 3 of 12 keys for 2 ms.
func randomJob(sp spec, impl string) []spec {
	var ps []spec
	for range 8 {
		s := sp
		s.Impl, s.Keys, s.Pick, s.Inflight, s.Hold = impl, keys(12), 3, 2, 2*time.Millisecond
		ps = append(ps, s)
	}
	return ps
}

// runCluster runs lockyard's random job reps times for dur on a 6-node
// Cluster and prints each run and the keys' slots.
func runCluster(reps int, dur time.Duration) error {
	c, err := redistest.StartCluster()
	if err != nil {
		return err
	}
	defer c.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	conn, err := redigo.Dial("tcp", c.Addrs[0])
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Printf("multi-key bench on a Cluster: %d runs of %v; 6 nodes (3 masters with a replica each) at %s; lockyard's registries PubSubLock, through the go-redis adapter\n\n",
		reps, dur, strings.Join(c.Addrs, " "))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tkeys' slots (masters)\tacq/s\toverlaps\terrors\tmin share\tlongest wait ms\twait p99 ms")
	for rep := range reps {
		pfx := fmt.Sprintf("cluster%d-%d", rep, rand.N(1<<30))
		slots, masters := map[int64]bool{}, map[string]bool{}
		for _, k := range keys(12) {
			slot, err := redigo.Int64(conn.Do("CLUSTER", "KEYSLOT", "bench-"+pfx+":"+k))
			if err != nil {
				return err
			}
			slots[slot] = true
			m, err := c.MasterAddr(int(slot))
			if err != nil {
				return err
			}
			masters[m] = true
		}
		r, err := measure(conn, self, pfx, randomJob(spec{Dur: dur, Cluster: c.Addrs}, "lockyard"))
		if err != nil {
			return fmt.Errorf("cluster run %d: %w", rep+1, err)
		}
		fmt.Fprintf(tw, "%d\t%d (%d)\t%.0f\t%d\t%d\t%.2f\t%.1f\t%.1f\n", rep+1, len(slots), len(masters),
			r.acqPerSec, r.overlaps, r.errors, r.minShare, r.longest, r.p99)
	}
	return tw.Flush()
}

// result is one run of one job.
type result struct {
	acqPerSec                 float64
	overlaps, errors          int
	minShare                  float64 // the smallest goroutine's count / the mean
	multi                     int     // acquisitions of the multi-key goroutine (starve)
	singlesPerSec             float64 // the single-key lockers' (starve)
	longest, p99              float64 // waits, ms (of the multi-key goroutine in starve)
	cpuPerAcq                 float64 // per acquisition
	clientCPUPerAcq           float64 // µs, the processes' own, per acquisition
	scriptsPerAcq, cmdsPerAcq float64
}

func measure(conn redigo.Conn, exe, pfx string, specs []spec) (result, error) {
	s0 := procs.Read(conn)
	st0, _ := redistest.CommandStatsOn(conn)
	if *debug {
		defer func() {
			st1, _ := redistest.CommandStatsOn(conn)
			for n, c := range st1 {
				if d := c.Calls - st0[n].Calls; d > 0 {
					fmt.Fprintf(os.Stderr, "%s %d %.0fus; ", n, d, c.Usec-st0[n].Usec)
				}
			}
			fmt.Fprintln(os.Stderr)
		}()
	}
	for i := range specs {
		specs[i].Pfx = "bench-" + pfx
	}
	reps, err := procs.Run[spec, report](exe, specs)
	if err != nil {
		return result{}, err
	}
	var (
		r      result
		counts []int
		spans  = map[string][][2]int64{}
		acq    int
		dur    time.Duration
		cpu    time.Duration
	)
	var waits []float64
	for i, rep := range reps {
		n := 0
		for _, c := range rep.Counts {
			n += c
		}
		acq += n
		counts = append(counts, rep.Counts...)
		for k, s := range rep.Spans {
			spans[k] = append(spans[k], s...)
		}
		r.errors += rep.Errors
		cpu += rep.CPU
		dur = specs[i].Dur
		switch {
		case specs[i].Listen: // the control: no acquisition of the job
			acq, counts = acq-n, counts[:len(counts)-len(rep.Counts)]
		case len(specs[i].Keys) > 1 && specs[i].Pick == 0 && len(specs) > 1: // starve: the multi-key goroutine
			r.multi, waits = n, rep.Waits
		case len(specs[i].Keys) == 1:
			r.singlesPerSec += float64(n) / dur.Seconds()
		default:
			waits = append(waits, rep.Waits...)
		}
	}
	if acq == 0 {
		return result{}, fmt.Errorf("no acquisition")
	}
	srv := procs.Read(conn).Since(s0)
	r.acqPerSec = float64(acq) / dur.Seconds()
	r.scriptsPerAcq, r.cmdsPerAcq = float64(srv.Scripts)/float64(acq), float64(srv.Calls)/float64(acq)
	r.cpuPerAcq = float64(srv.CPU.Microseconds()) / float64(acq)
	r.clientCPUPerAcq = float64(cpu.Microseconds()) / float64(acq)
	mean := float64(acq) / float64(len(counts))
	r.minShare = float64(slices.Min(counts)) / mean
	for _, s := range spans {
		r.overlaps += overlaps(s)
	}
	if len(waits) > 0 {
		r.longest, r.p99 = slices.Max(waits), stat.Percentile(waits, 99)
	}
	return r, nil
}

var debug = flag.Bool("debug", false, "print the commands of each run")

// overlaps counts the sections of one key that began before the one
// before them ended.
func overlaps(spans [][2]int64) int {
	slices.SortFunc(spans, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	n := 0
	var end int64
	for i, s := range spans {
		if i > 0 && s[0] < end {
			n++
		}
		end = max(end, s[1])
	}
	return n
}

func print(sc string, names []string, res procs.Results[result], base string) {
	fmt.Printf("\n#### %s (medians)\n\n", sc)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| job\t acq/s\t overlaps\t errors\t min share\t multi-key acq\t longest wait ms\t wait p99 ms\t single-key acq/s\t scripts/acq\t commands/acq\t Redis CPU µs/acq\t client CPU µs/acq\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	med := res.Median
	most := func(name string, f func(result) int) int {
		n := 0
		for _, r := range res[name] {
			n = max(n, f(r))
		}
		return n
	}
	for _, n := range names {
		fmt.Fprintf(tw, "| %s\t %.0f\t %d\t %d\t %.2f\t %.0f\t %.1f\t %.1f\t %.0f\t %.2f\t %.2f\t %.1f\t %.0f\t\n", n,
			med(n, func(r result) float64 { return r.acqPerSec }), most(n, func(r result) int { return r.overlaps }),
			most(n, func(r result) int { return r.errors }), med(n, func(r result) float64 { return r.minShare }),
			med(n, func(r result) float64 { return float64(r.multi) }), med(n, func(r result) float64 { return r.longest }),
			med(n, func(r result) float64 { return r.p99 }), med(n, func(r result) float64 { return r.singlesPerSec }),
			med(n, func(r result) float64 { return r.scriptsPerAcq }), med(n, func(r result) float64 { return r.cmdsPerAcq }),
			med(n, func(r result) float64 { return r.cpuPerAcq }), med(n, func(r result) float64 { return r.clientCPUPerAcq }))
	}
	_ = tw.Flush()
	ratio := res.Ratio
	switch sc {
	case "random":
		ratio("lockyard random 3 of 12", "ObtainMulti random 3 of 12", func(r result) float64 { return r.acqPerSec }, "throughput")
		ratio("lockyard random 3 of 12", "ObtainMulti random 3 of 12", func(r result) float64 { return r.cpuPerAcq }, "Redis CPU per acquisition")
		ratio("lockyard random 3 of 12", "ObtainMulti random 3 of 12", func(r result) float64 { return r.clientCPUPerAcq }, "client CPU per acquisition")
	case "starve":
		for _, c := range []string{"lockyard", "ObtainMulti"} {
			ratio(c+" singles + multi", c+" singles alone", func(r result) float64 { return r.singlesPerSec }, "single-key lockers' throughput beside the multi-key one")
			ratio(c+" singles + a waiting RedisLock", c+" singles alone", func(r result) float64 { return r.singlesPerSec }, "the same beside a waiting single-key lock (the control)")
			ratio(c+" singles + 5 waiting RedisLocks", c+" singles alone", func(r result) float64 { return r.singlesPerSec }, "the same beside 5 registries that each wait for a key of their own (as many that hear every release as with the multi-key one)")
		}
	case "uncontended":
		ratio("lockyard 5 keys", "ObtainMulti 5 keys", func(r result) float64 { return r.cpuPerAcq }, "Redis CPU per acquisition")
	}
	if base == "" {
		return
	}
	for _, n := range names { // this build against the base, job by job
		job, ok := strings.CutPrefix(n, "lockyard ")
		if !ok || strings.HasPrefix(job, "@") {
			continue
		}
		b := "lockyard @" + base + " " + job
		ratio(n, b, func(r result) float64 { return r.acqPerSec }, "throughput, against the base")
		ratio(n, b, func(r result) float64 { return r.cpuPerAcq }, "Redis CPU per acquisition, against the base")
		ratio(n, b, func(r result) float64 { return r.cmdsPerAcq }, "server calls per acquisition, against the base")
		ratio(n, b, func(r result) float64 { return r.clientCPUPerAcq }, "client CPU per acquisition, against the base")
	}
}

// locker takes and releases keys for one process.
type locker interface {
	take(ctx context.Context, keys []string) (release func() error, err error)
}

type lockyardLocker struct{ reg *registry.Registry }

func (l lockyardLocker) take(ctx context.Context, keys []string) (func() error, error) {
	var le *registry.Lease
	var err error
	if len(keys) == 1 {
		le, err = l.reg.Acquire(ctx, keys[0], 0)
	} else {
		le, err = l.reg.AcquireAll(ctx, keys, 0)
	}
	if err != nil {
		return nil, err
	}
	return func() error { return le.Release(context.Background()) }, nil
}

type peerLocker struct {
	c     *redislock.Client
	pfx   string
	retry time.Duration
}

func (l peerLocker) take(ctx context.Context, keys []string) (func() error, error) {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = l.pfx + ":" + k
	}
	lk, err := l.c.ObtainMulti(ctx, full, 30*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(l.retry)})
	if err != nil {
		return nil, err
	}
	return func() error { return lk.Release(context.Background()) }, nil
}

// listen runs a Listen process: one registry holds the key, another waits
// for it in Redis until Dur has passed.
func listen(sp spec) error {
	rep := report{Counts: []int{0}, Spans: map[string][][2]int64{}}
	if sp.Impl == "lockyard" {
		pool := &redigo.Pool{MaxIdle: 4, Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", sp.Addr) }}
		defer pool.Close()
		var regs [2]*registry.Registry
		for i := range regs {
			reg, err := registry.New(pool, sp.Pfx, registry.WithLockType(registry.PubSubLock), registry.WithAutoRenew())
			if err != nil {
				return err
			}
			defer reg.Close()
			regs[i] = reg
		}
		le, err := regs[0].Acquire(context.Background(), sp.Keys[0], 0)
		if err != nil {
			return err
		}
		defer le.Release(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), sp.Dur)
		defer cancel()
		if _, err := regs[1].Acquire(ctx, sp.Keys[0], 0); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the listener's wait ended with %v", err)
		}
	} else {
		time.Sleep(sp.Dur)
	}
	rep.Counts[0] = 1 // not counted as an acquisition of the job
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// runWorker runs one process for Dur.
func runWorker(js string) error {
	var sp spec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		return err
	}
	if sp.Listen {
		return listen(sp)
	}
	var l locker
	switch sp.Impl {
	case "lockyard":
		if len(sp.Cluster) > 0 {
			rdb := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: sp.Cluster, PoolSize: sp.Inflight + 2})
			defer rdb.Close()
			reg, err := registry.NewWithClient(lygoredis.NewClient(rdb), sp.Pfx, registry.WithLockType(registry.PubSubLock), registry.WithAutoRenew())
			if err != nil {
				return err
			}
			defer reg.Close()
			l = lockyardLocker{reg}
			break
		}
		pool := &redigo.Pool{MaxIdle: sp.Inflight + 2, Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", sp.Addr) }}
		defer pool.Close()
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithAutoRenew()}
		if sp.Spin {
			opts = []registry.Option{registry.WithLockType(registry.SpinLock), registry.WithIdleBetweenTries(sp.Retry), registry.WithAutoRenew()}
		}
		reg, err := registry.New(pool, sp.Pfx, opts...)
		if err != nil {
			return err
		}
		defer reg.Close()
		l = lockyardLocker{reg}
	case "redislock":
		c := goredis.NewClient(&goredis.Options{Addr: sp.Addr, PoolSize: sp.Inflight + 2})
		defer c.Close()
		l = peerLocker{c: redislock.New(c), pfx: sp.Pfx, retry: sp.Retry}
	default:
		return fmt.Errorf("impl %q", sp.Impl)
	}
	var (
		mu  sync.Mutex
		rep = report{Counts: make([]int, sp.Inflight), Spans: map[string][][2]int64{}}
		wg  sync.WaitGroup
	)
	cpu0 := processCPU()
	end := time.Now().Add(sp.Dur)
	for g := range sp.Inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				ks := sp.Keys
				if sp.Pick > 0 {
					ks = slices.Clone(sp.Keys)
					rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
					ks = ks[:sp.Pick]
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				release, err := l.take(ctx, ks)
				cancel()
				if err != nil {
					mu.Lock()
					rep.Errors++
					mu.Unlock()
					if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redislock.ErrNotObtained) {
						continue
					}
					return
				}
				got := time.Now()
				if sp.Hold > 0 {
					time.Sleep(sp.Hold)
				}
				left := time.Now()
				if err := release(); err != nil {
					mu.Lock()
					rep.Errors++
					mu.Unlock()
				}
				mu.Lock()
				rep.Counts[g]++
				rep.Waits = append(rep.Waits, float64(got.Sub(t0).Microseconds())/1000)
				if sp.Hold > 0 {
					for _, k := range ks {
						rep.Spans[k] = append(rep.Spans[k], [2]int64{got.UnixMicro(), left.UnixMicro()})
					}
				}
				mu.Unlock()
				if sp.Pause > 0 {
					time.Sleep(sp.Pause)
				}
			}
		}()
	}
	wg.Wait()
	rep.CPU = processCPU() - cpu0
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
