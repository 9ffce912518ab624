package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"golang.org/x/sys/unix"
)

// The uncontended CPU scenario ("u"): every contender in this process, one
// at a time, in short bursts of lock+unlock cycles on a key of its own, in
// a new shuffled order each round. A burst is short enough that the
// machine's slow drifts hit every contender alike; the figures are medians
// over rounds, per cycle:
//   - wall time;
//   - client CPU: getrusage of this process (user + system), which counts
//     every goroutine, the garbage collector and the clients' own
//     background goroutines included;
//   - Redis CPU: the delta of used_cpu_user + used_cpu_sys in INFO cpu of
//     the private redis-server, which serves nothing else meanwhile;
//   - allocations: runtime.MemStats.Mallocs;
//   - server calls: INFO commandstats, commands inside scripts included;
//   - command time: the server's own time (INFO commandstats usec) in the
//     commands the client sent (their names, read off its connections): a
//     script's, its inner commands included; not the I/O around them.

var cpuCols = []string{"wall us", "client CPU us", "Redis CPU us", "cmd us", "allocs", "srv calls",
	"wall / best peer", "Redis CPU / best peer", "wall / floor", "client CPU / floor", "Redis CPU / floor"}

// cpuRun measures every contender of scenario u in rounds shuffled bursts
// of burst cycles each, after one warm-up burst each.
func (e *env) cpuRun(rounds, burst int) (table, error) {
	t, err := e.bursts("u", rounds, burst, func(lk locker) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			if err := lk.lock(ctx); err != nil {
				return err
			}
			return lk.unlock(ctx)
		}, nil
	})
	if err == nil {
		t.cpuRatios()
	}
	return t, err
}

// renewRun measures the renewal scenario ("r") as cpuRun measures u: each
// contender holds its lock, and a cycle is one renewal of it.
func (e *env) renewRun(rounds, burst int) (table, error) {
	t, err := e.bursts("r", rounds, burst, func(lk locker) (func(context.Context) error, error) {
		rn, ok := lk.(renewer)
		if !ok {
			return nil, fmt.Errorf("%T cannot renew", lk)
		}
		return rn.renew, lk.lock(context.Background())
	})
	if err == nil {
		t.renewRatios()
	}
	return t, err
}

// bursts measures the contenders of scenario sc in rounds shuffled bursts
// of burst cycles each, after one warm-up burst each; cycle sets up a
// contender's locker and returns its cycle.
func (e *env) bursts(sc string, rounds, burst int, cycle func(locker) (func(context.Context) error, error)) (table, error) {
	type contender struct {
		im    impl
		cl    client
		cycle func(context.Context) error
		ctr   counter
	}
	var cs []*contender
	defer func() {
		for _, c := range cs {
			c.cl.close()
		}
	}()
	for _, im := range impls {
		if !im.in(sc) {
			continue
		}
		c := &contender{im: im}
		cl, err := im.open(e.lock.Addr, &c.ctr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.name, err)
		}
		c.cl = cl
		cs = append(cs, c)
		lk, err := cl.locker(fmt.Sprintf("%s:%d:%s", sc, mono(), strings.ReplaceAll(im.name, " ", "-")))
		if err == nil {
			c.cycle, err = cycle(lk)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.name, err)
		}
	}
	// One connection for the measurements: INFO on a new one would count
	// its accept and close in the burst.
	mc, err := redigo.Dial("tcp", e.lock.Addr)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	t := table{}
	for round := -1; round < rounds; round++ {
		fmt.Fprintf(os.Stderr, "\rscenario %s: round %d/%d", sc, round+1, rounds)
		rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
		for _, c := range cs {
			m, err := cpuBurst(mc, c.cycle, &c.ctr, burst)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.im.name, err)
			}
			if round >= 0 { // round -1 warms the connections and the scripts
				t.add(sc, c.im.name, m)
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	return t, nil
}

// cpuBurst runs n cycles and returns the per-cycle figures.
func cpuBurst(mc redigo.Conn, cycle func(context.Context) error, ctr *counter, n int) (metrics, error) {
	ctx := context.Background()
	runtime.GC() // a collection owed by the previous contender is not this one's
	var ms0, ms1 runtime.MemStats
	calls0 := serverCallsOn(mc)
	st0, err := redistest.CommandStatsOn(mc)
	if err != nil {
		return nil, err
	}
	srv0, err := redistest.ServerCPU(mc)
	if err != nil {
		return nil, err
	}
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	t0 := time.Now()
	for range n {
		if err := cycle(ctx); err != nil {
			return nil, err
		}
	}
	wall := time.Since(t0)
	cpu1 := processCPU()
	runtime.ReadMemStats(&ms1)
	srv1, err := redistest.ServerCPU(mc)
	if err != nil {
		return nil, err
	}
	calls1 := serverCallsOn(mc)
	st1, err := redistest.CommandStatsOn(mc)
	if err != nil {
		return nil, err
	}
	var usec float64
	for _, name := range ctr.sent() {
		if name != "info" { // the measurements' own, on mc
			usec += st1[name].Usec - st0[name].Usec
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	return metrics{
		"wall us":       per(wall),
		"client CPU us": per(cpu1 - cpu0),
		"Redis CPU us":  per(srv1 - srv0),
		"cmd us":        usec / float64(n),
		"allocs":        float64(ms1.Mallocs-ms0.Mallocs) / float64(n),
		"srv calls":     float64(calls1-calls0) / float64(n),
	}, nil
}

// cpuRatios adds, per contender, its medians' ratios to the best peer's and
// to the floor's (the raw client's).
func (t table) cpuRatios() {
	floor := func(col string) float64 {
		for _, im := range impls {
			if im.floor {
				return t.med("u", im.name, col)
			}
		}
		return math.NaN()
	}
	for _, im := range impls {
		if !im.in("u") {
			continue
		}
		ratio := func(col string, base float64) float64 { return t.med("u", im.name, col) / base }
		bestWall, _ := t.lowest("u", "wall us", isPeer)
		bestCPU, _ := t.lowest("u", "Redis CPU us", isPeer)
		t.add("u", im.name, metrics{
			"wall / best peer":      ratio("wall us", bestWall),
			"Redis CPU / best peer": ratio("Redis CPU us", bestCPU),
			"wall / floor":          ratio("wall us", floor("wall us")),
			"client CPU / floor":    ratio("client CPU us", floor("client CPU us")),
			"Redis CPU / floor":     ratio("Redis CPU us", floor("Redis CPU us")),
		})
	}
}

// lowest returns the lowest median of col among the scenario's impls that
// pass keep.
func (t table) lowest(sc, col string, keep func(impl) bool) (float64, string) {
	b, name := math.Inf(1), ""
	for _, im := range impls {
		if !im.in(sc) || !keep(im) {
			continue
		}
		if v := t.med(sc, im.name, col); v < b {
			b, name = v, im.name
		}
	}
	return b, name
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// renewRatios adds, per contender of scenario r, its command time and
// Redis CPU against those of lockyard renewing by script.
func (t table) renewRatios() {
	for _, im := range impls {
		if im.in("r") {
			t.add("r", im.name, metrics{
				"cmd / script":       t.med("r", im.name, "cmd us") / t.med("r", scriptsImpl, "cmd us"),
				"Redis CPU / script": t.med("r", im.name, "Redis CPU us") / t.med("r", scriptsImpl, "Redis CPU us"),
			})
		}
	}
}

// Allocations per cycle before issue 16 (plain SET obtain), measured with
// this scenario: the client-side goal is to be no worse.
var allocsBefore = map[string]float64{"lockyard spin": 36, "lockyard spin, go-redis": 38}

// cpuTargets are the goals of scenario u: each lockyard row against the
// best peer (the go-redis adapter against bsm/redislock, which uses the
// same client): wall and Redis CPU at most 1.0x, client CPU no more than
// the best peer's, and allocations no more than before.
func (t table) cpuTargets() []target {
	var ts []target
	for _, c := range []struct{ us, peer string }{
		{"lockyard spin", ""},
		{"lockyard spin, go-redis", "redislock tuned"},
	} {
		keep := isPeer
		if c.peer != "" {
			keep = func(im impl) bool { return im.name == c.peer }
		}
		for _, col := range []string{"wall us", "Redis CPU us", "client CPU us"} {
			them, tn := t.lowest("u", col, keep)
			r := t.med("u", c.us, col) / them
			ts = append(ts, target{fmt.Sprintf("su %s, %s / %s", strings.TrimSuffix(col, " us"), c.us, tn), r, r <= 1.0, "<= 1.0x"})
		}
		a := t.med("u", c.us, "allocs")
		ts = append(ts, target{fmt.Sprintf("su allocs/cycle, %s", c.us), a, a <= allocsBefore[c.us], fmt.Sprintf("<= %.0f (before)", allocsBefore[c.us])})
	}
	return ts
}
