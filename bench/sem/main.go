// Command sem compares lockyard's Semaphore with the npm package
// redis-semaphore (its Semaphore on ioredis, with its defaults) on one
// private redis-server: the same shapes, the contenders interleaved in
// short alternating runs, medians over the repetitions. What is compared
// is the server's work, the waits and the fairness, not Go against Node:
// Redis CPU and server calls (INFO commandstats, commands run by scripts
// included) per acquisition, acquisitions/s, wait p50 and p99, the
// smallest share of the acquisitions across processes, and how long a
// SIGKILLed holder's permit stays taken.
//
// With -base REV it also runs lockyard built at that git revision, in the
// same alternation, and prints this build's ratios to it (an A/B of a
// change against its parent). The "fair floor" contender is a yardstick:
// a minimal fair semaphore whose waiters are given their permits
// (floor.go); -floors adds its steps towards lockyard's guarantees.
//
// It needs node and the peer installed in bench/sem/peer (`make bench`
// runs npm install there). Run it from bench/: go run ./sem.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/bench/internal/abbuild"
	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// shape is one load: procs processes, each with inflight acquisitions in
// flight, on a semaphore of permits, each holding its permit hold, and
// waiting gap after each release before it acquires again.
type shape struct {
	name                     string
	procs, inflight, permits int
	hold, gap                time.Duration
}

// contender is one semaphore implementation.
type contender struct {
	name string
	// cmd returns the command of process proc (0, 1, ... of a run): mode "loop" (acquire, hold,
	// release for dur), "hold" (acquire one permit and wait to be
	// killed) or "once" (acquire one permit, print the wait).
	cmd func(proc int, addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd
}

// report is what a process prints: its acquisitions and their waits (ms).
type report struct {
	Acquisitions int       `json:"acquisitions"`
	Waits        []float64 `json:"waits"`
}

func main() {
	var (
		reps   = flag.Int("reps", 5, "repetitions of every shape per contender, alternating")
		dur    = flag.Duration("dur", 2*time.Second, "length of one run")
		ttl    = flag.Duration("ttl", 2*time.Second, "permit TTL (lockTimeout of the peer), also of the crash scenario")
		worker = flag.String("worker", "", "internal: run one lockyard process (JSON spec)")
		peer   = flag.String("peer", "peer", "the folder of the peer (npm install done)")
		only   = flag.String("shapes", "", "run only the shapes whose names contain this (and no crash scenario); crash: only the crash scenario")
		base   = flag.String("base", "", "also run lockyard built at this git revision (A/B; not in the crash scenario)")
		who    = flag.String("contenders", "", "run only the contenders whose names contain one of these, comma-separated (the ratios need the peer or the base among them)")
		floors = flag.Bool("floors", false, "also run the fair floor's steps towards lockyard (floor.go)")
	)
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*reps, *dur, *ttl, *peer, *only, *base, *who, *floors); err != nil {
		fmt.Fprintln(os.Stderr, "sem:", err)
		os.Exit(1)
	}
}

func run(reps int, dur, ttl time.Duration, peerDir, only, base, who string, floors bool) error {
	peerJS, err := filepath.Abs(filepath.Join(peerDir, "peer.js"))
	if err != nil {
		return err
	}
	// picked reports whether contender name is to run (-contenders).
	picked := func(name string) bool {
		return slices.ContainsFunc(strings.Split(who, ","), func(w string) bool { return strings.Contains(name, w) })
	}
	if _, err := os.Stat(filepath.Join(peerDir, "node_modules", "redis-semaphore")); err != nil && picked("redis-semaphore") {
		return fmt.Errorf("the peer is not installed: run npm install in %s (make bench does)", peerDir)
	}
	srv, err := redistest.Start()
	if err != nil {
		return err
	}
	defer srv.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	contenders := []contender{
		{"lockyard pubsub", lockyardCmd(self, "pubsub")},
		{"lockyard spin 10ms", lockyardCmd(self, "spin")}, // polls as often as the peer
		{"lockyard mixed", lockyardCmd(self, "mixed")},    // PubSub, Spin, ReleaseAfter and TryAcquire processes, brace keys
		{"fair floor", lockyardCmd(self, "floor")},        // a minimal fair semaphore with grants (floor.go)
	}
	if floors {
		contenders = append(contenders, contender{"fair floor +server clock", lockyardCmd(self, "floor+")},
			contender{"fair floor +clock +liveness", lockyardCmd(self, "floor++")},
			contender{"fair floor +clock +liveness +probe", lockyardCmd(self, "floor+++")})
	}
	if base != "" {
		exe, cleanup, err := abbuild.At(base, "./sem")
		if err != nil {
			return fmt.Errorf("building the bench against %s: %w", base, err)
		}
		defer cleanup()
		contenders = append(contenders, contender{"lockyard pubsub @" + base, lockyardCmd(exe, "pubsub")},
			contender{"lockyard spin 10ms @" + base, lockyardCmd(exe, "spin")}, contender{"lockyard mixed @" + base, lockyardCmd(exe, "mixed")})
	}
	contenders = append(contenders, contender{"redis-semaphore", func(proc int, addr, key string, sh shape, dur, ttl time.Duration, mode string) *exec.Cmd {
		return exec.Command("node", peerJS, addr, key, strconv.Itoa(sh.permits), strconv.Itoa(sh.inflight),
			strconv.FormatInt(dur.Milliseconds(), 10), strconv.FormatInt(sh.hold.Milliseconds(), 10),
			strconv.FormatInt(ttl.Milliseconds(), 10), mode, strconv.FormatInt(sh.gap.Milliseconds(), 10))
	}}) // the peer last: the ratios are against it
	contenders = slices.DeleteFunc(contenders, func(c contender) bool { return !picked(c.name) })
	if len(contenders) == 0 {
		return fmt.Errorf("no contender's name contains %q", who)
	}
	shapes := []shape{
		{name: "uncontended: 1 process x 1, 1 permit, no hold", procs: 1, inflight: 1, permits: 1},
		{name: "4 processes x 4 in flight on 2 permits, 2ms hold", procs: 4, inflight: 4, permits: 2, hold: 2 * time.Millisecond},
		{name: "4 processes x 4 in flight on 4 permits, 2ms hold", procs: 4, inflight: 4, permits: 4, hold: 2 * time.Millisecond},
		{name: "16 processes x 1 in flight on 3 permits, 5ms hold", procs: 16, inflight: 1, permits: 3, hold: 5 * time.Millisecond},
		// Now and then a waiter: releases find one at some, not all.
		{name: "4 processes x 1 in flight on 2 permits, 2ms hold, 4ms gaps", procs: 4, inflight: 1, permits: 2, hold: 2 * time.Millisecond, gap: 4 * time.Millisecond},
	}
	fmt.Printf("semaphore bench: %d reps of %v per shape and contender, alternating; redis-server %s\n", reps, dur, srv.Addr)
	for _, sh := range shapes {
		if !strings.Contains(sh.name, only) {
			continue
		}
		res := map[string][]metrics{}
		for rep := range reps {
			order := slices.Clone(contenders)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for i, c := range order {
				m, err := measure(srv.Addr, fmt.Sprintf("sem%d-%d", rep, i), c, sh, dur, ttl)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", sh.name, c.name, err)
				}
				res[c.name] = append(res[c.name], m)
			}
		}
		printShape(sh, contenders, res)
	}
	if only != "" && only != "crash" {
		return nil
	}
	return crash(srv.Addr, slices.DeleteFunc(contenders, func(c contender) bool {
		return strings.Contains(c.name, " @") || strings.Contains(c.name, "mixed") || isFloor(c.name)
	}), ttl, reps)
}

// metrics is one run of one contender.
type metrics struct {
	acqPerSec, callsPerAcq, scriptsPerAcq, cpuPerAcq, p50, p99, minShare float64
	perCmd                                                               map[string]float64 // calls per acquisition of each command
	procP99, procAcq                                                     []float64          // each process's wait p99 (ms; NaN without a wait) and acquisitions
	usecPerAcq                                                           float64            // the server's time in commands (INFO commandstats usec)
	clientCPUPerAcq                                                      float64            // the contender's processes' CPU (µs, user+system)
}

// measure runs sh once for c and measures it from the server's counters.
func measure(addr, key string, c contender, sh shape, dur, ttl time.Duration) (metrics, error) {
	conn, err := redigo.Dial("tcp", addr)
	if err != nil {
		return metrics{}, err
	}
	defer conn.Close()
	calls0, cpu0 := serverCalls(conn), serverCPU(conn)
	scripts0 := scriptCalls(conn)
	stats0, err := redistest.CommandStatsOn(conn)
	if err != nil {
		return metrics{}, err
	}
	cmds := make([]*exec.Cmd, sh.procs)
	outs := make([]*strings.Builder, sh.procs)
	for i := range cmds {
		cmds[i] = c.cmd(i, addr, key, sh, dur, ttl, "loop")
		outs[i] = &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], os.Stderr
		if err := cmds[i].Start(); err != nil {
			return metrics{}, err
		}
	}
	var (
		total     int
		waits     []float64
		per       []float64
		procP99   []float64
		clientCPU time.Duration
	)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return metrics{}, fmt.Errorf("process %d: %w", i, err)
		}
		clientCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		var r report
		if err := json.Unmarshal([]byte(strings.TrimSpace(outs[i].String())), &r); err != nil {
			return metrics{}, fmt.Errorf("process %d: %w: %q", i, err, outs[i].String())
		}
		total += r.Acquisitions
		waits = append(waits, r.Waits...)
		per = append(per, float64(r.Acquisitions))
		p99 := math.NaN()
		if len(r.Waits) > 0 {
			p99 = stat.Percentile(r.Waits, 99)
		}
		procP99 = append(procP99, p99)
	}
	if total == 0 {
		return metrics{}, fmt.Errorf("no acquisition")
	}
	calls, cpu := serverCalls(conn)-calls0-1, serverCPU(conn)-cpu0
	scripts := scriptCalls(conn) - scripts0
	stats, err := redistest.CommandStatsOn(conn)
	if err != nil {
		return metrics{}, err
	}
	perCmd := map[string]float64{}
	usec := 0.0
	for name, st := range stats {
		if d := st.Calls - stats0[name].Calls; d > 0 && name != "info" {
			perCmd[name] = float64(d) / float64(total)
			if name == "evalsha" || name == "eval" {
				usec += st.Usec - stats0[name].Usec
			}
		}
	}
	return metrics{
		perCmd:          perCmd,
		usecPerAcq:      usec / float64(total),
		clientCPUPerAcq: float64(clientCPU.Microseconds()) / float64(total),
		acqPerSec:       float64(total) / dur.Seconds(),
		callsPerAcq:     float64(calls) / float64(total),
		scriptsPerAcq:   float64(scripts) / float64(total),
		cpuPerAcq:       float64(cpu.Microseconds()) / float64(total),
		p50:             stat.Percentile(waits, 50),
		p99:             stat.Percentile(waits, 99),
		minShare:        slices.Min(per) / float64(total),
		procP99:         procP99,
		procAcq:         per,
	}, nil
}

func printShape(sh shape, cs []contender, res map[string][]metrics) {
	fmt.Printf("\n#### %s (medians)\n\n", sh.name)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| contender\t acq/s\t srv calls/acq\t scripts/acq\t Redis CPU us/acq\t wait p50 ms\t wait p99 ms\t min share\t")
	col := func(name string, f func(metrics) float64) float64 {
		var xs []float64
		for _, m := range res[name] {
			xs = append(xs, f(m))
		}
		return stat.Median(xs)
	}
	for _, c := range cs {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t %s\t %s\t %.3f\t\n", c.name,
			stat.Format(col(c.name, func(m metrics) float64 { return m.acqPerSec })),
			stat.Format(col(c.name, func(m metrics) float64 { return m.callsPerAcq })),
			stat.Format(col(c.name, func(m metrics) float64 { return m.scriptsPerAcq })),
			stat.Format(col(c.name, func(m metrics) float64 { return m.cpuPerAcq })),
			stat.Format(col(c.name, func(m metrics) float64 { return m.p50 })),
			stat.Format(col(c.name, func(m metrics) float64 { return m.p99 })),
			col(c.name, func(m metrics) float64 { return m.minShare }))
	}
	tw.Flush()
	// Ratios of a to b per repetition (the runs of one repetition were
	// adjacent), then their median.
	ratios := func(a, b, label string) {
		r := func(f func(metrics) float64) float64 {
			var xs []float64
			for i, m := range res[a] {
				if d := f(res[b][i]); d > 0 {
					xs = append(xs, f(m)/d)
				}
			}
			return stat.Median(xs)
		}
		fmt.Printf("%s / %s: acq/s %.2f, Redis CPU/acq %.2f, srv calls/acq %.2f, wait p99 %.2f, min share %.2f\n", a, label,
			r(func(m metrics) float64 { return m.acqPerSec }), r(func(m metrics) float64 { return m.cpuPerAcq }),
			r(func(m metrics) float64 { return m.callsPerAcq }), r(func(m metrics) float64 { return m.p99 }),
			r(func(m metrics) float64 { return m.minShare }))
	}
	if peer := cs[len(cs)-1].name; peer == "redis-semaphore" {
		for _, c := range cs[:len(cs)-1] {
			ratios(c.name, peer, peer)
		}
	}
	for _, c := range cs { // lockyard against the floor (floor.go)
		if floor := "fair floor"; res[floor] != nil && res[c.name] != nil && strings.HasPrefix(c.name, "lockyard") {
			ratios(c.name, floor, floor)
		}
	}
	for _, c := range cs { // this build against the base, where there is one
		if name, rev, ok := strings.Cut(c.name, " @"); ok && res[name] != nil {
			ratios(name, c.name, name+" at "+rev)
		}
	}
	// Server calls per acquisition by command (medians).
	for _, c := range cs {
		names := map[string]bool{}
		for _, m := range res[c.name] {
			for n := range m.perCmd {
				names[n] = true
			}
		}
		var parts []string
		for _, n := range slices.Sorted(maps.Keys(names)) {
			if v := col(c.name, func(m metrics) float64 { return m.perCmd[n] }); v >= 0.005 {
				parts = append(parts, fmt.Sprintf("%s %.2f", n, v))
			}
		}
		fmt.Printf("%s calls/acq by command: %s\n", c.name, strings.Join(parts, ", "))
		fmt.Printf("%s scripts' usec/acq: %.1f; client CPU us/acq (its processes, start-up included): %.0f\n", c.name,
			col(c.name, func(m metrics) float64 { return m.usecPerAcq }), col(c.name, func(m metrics) float64 { return m.clientCPUPerAcq }))
	}
	// The mixed contender's processes differ: each one's wait p99 and
	// acquisitions (medians over the repetitions; a p99 of a repetition
	// without a wait is left out).
	for _, c := range cs {
		if !strings.HasPrefix(c.name, "lockyard mixed") || len(res[c.name]) == 0 || sh.procs > 4 {
			continue
		}
		var parts []string
		for i := range sh.procs {
			var p99s, acqs []float64
			for _, m := range res[c.name] {
				if i < len(m.procP99) && !math.IsNaN(m.procP99[i]) {
					p99s = append(p99s, m.procP99[i])
				}
				if i < len(m.procAcq) {
					acqs = append(acqs, m.procAcq[i])
				}
			}
			p99 := "-"
			if len(p99s) > 0 {
				p99 = stat.Format(stat.Median(p99s)) + " ms"
			}
			parts = append(parts, fmt.Sprintf("%s: p99 %s, %.0f acquisitions", mixedRole(i), p99, stat.Median(acqs)))
		}
		fmt.Printf("%s wait by process (medians): %s\n", c.name, strings.Join(parts, "; "))
	}
}

// crash measures, for each contender, how long a SIGKILLed holder's
// permit of a 1-permit semaphore stays taken: the holder, which acquired
// and released a permit first (a warm connection), is killed right after
// its second acquisition (no renewal moved its expiry), and a new process
// acquires the permit. Both print the wall clock (µs) when they acquired: the
// figures are the next acquisition after the kill, and after the holder's
// acquisition (TTL plus how late the permit was taken again: the figure
// that compares the contenders; the first also counts how soon after its
// acquisition the holder was killed, which is printed too). The
// processes' start-up and exit are not counted.
func crash(addr string, cs []contender, ttl time.Duration, reps int) error {
	fmt.Printf("\n#### a SIGKILLed holder's permit (TTL %v): taken again (medians of %d)\n\n", ttl, reps)
	fmt.Println("| contender | after the holder's acquisition | past the TTL | after the kill | (the kill after the acquisition) |")
	fmt.Println("|---|---:|---:|---:|---:|")
	sh := shape{procs: 1, inflight: 1, permits: 1}
	for _, c := range cs {
		var afterKill, afterHeld, killLag []float64
		for rep := range reps {
			key := fmt.Sprintf("crash-%d-%s", rep, strings.ReplaceAll(c.name, " ", "-"))
			holder := c.cmd(0, addr, key, sh, 0, ttl, "hold")
			out, err := holder.StdoutPipe()
			if err != nil {
				return err
			}
			holder.Stderr = os.Stderr
			if err := holder.Start(); err != nil {
				return err
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			word, at, _ := strings.Cut(strings.TrimSpace(line), " ")
			held, perr := strconv.ParseInt(at, 10, 64)
			if err != nil || word != "held" || perr != nil {
				_ = holder.Process.Kill()
				return fmt.Errorf("%s holder: %q %v %v", c.name, line, err, perr)
			}
			_ = holder.Process.Signal(syscall.SIGKILL)
			killed := time.Now().UnixMicro()
			_ = holder.Wait()
			next := c.cmd(1, addr, key, sh, 0, ttl, "once")
			next.Stderr = os.Stderr
			ctx, cancel := context.WithTimeout(context.Background(), 3*ttl+10*time.Second)
			b, err := exec.CommandContext(ctx, next.Path, next.Args[1:]...).Output()
			cancel()
			if err != nil {
				return fmt.Errorf("%s: the next acquisition: %w", c.name, err)
			}
			taken, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return fmt.Errorf("%s: the next acquisition printed %q", c.name, b)
			}
			afterKill = append(afterKill, float64(taken-killed)/1000)
			afterHeld = append(afterHeld, float64(taken-held)/1000)
			killLag = append(killLag, float64(killed-held)/1000)
		}
		fmt.Printf("| %s | %s ms | %s ms | %s ms | %s ms |\n", c.name, stat.Format(stat.Median(afterHeld)),
			stat.Format(stat.Median(afterHeld)-float64(ttl.Milliseconds())), stat.Format(stat.Median(afterKill)), stat.Format(stat.Median(killLag)))
	}
	return nil
}

// serverCalls sums INFO commandstats calls, scripts' commands included,
// INFO's excluded.
func serverCalls(c redigo.Conn) int64 {
	return redistest.CommandCalls(c, func(name string) bool { return name != "info" })
}

// scriptCalls counts the scripts run (EVALSHA and EVAL).
func scriptCalls(c redigo.Conn) int64 {
	return redistest.CommandCalls(c, func(name string) bool { return name == "evalsha" || name == "eval" })
}

func serverCPU(c redigo.Conn) time.Duration {
	d, _ := redistest.ServerCPU(c)
	return d
}
