package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// The fairness scenarios: one key shared by clients that wait in different
// ways (Spring clients that write no queue entry, many registries, pollers
// among listeners, leases that end by expiry, TryLock, brace keys). Each
// run is a child process of this binary (-worker NAME), or of the same
// program built against another lockyard revision (-base REV, ab.go), so
// that the two are measured interleaved.

type scenario struct {
	name, title string
	cols        []string
	run         func(f *fairRun) (metrics, error)
}

var scenarios = []scenario{
	{"spring-pubsub", "Spring PUB_SUB client beside a PubSubLock registry with 3 goroutines (200us sections), 10s",
		springCols, func(f *fairRun) (metrics, error) { return f.spring(true, registry.PubSubLock) }},
	{"spring-pubsub-s", "Spring PUB_SUB client beside a SpinLock registry with 3 goroutines (200us sections), 10s",
		springCols, func(f *fairRun) (metrics, error) { return f.spring(true, registry.SpinLock) }},
	{"spring-spin", "Spring SPIN client (100ms retry) beside a PubSubLock registry with 3 goroutines, 10s",
		springCols, func(f *fairRun) (metrics, error) { return f.spring(false, registry.PubSubLock) }},
	{"spring-spin-s", "Spring SPIN client (100ms retry) beside a SpinLock registry with 3 goroutines, 10s",
		springCols, func(f *fairRun) (metrics, error) { return f.spring(false, registry.SpinLock) }},
	{"spring-spin-1ms", "Spring SPIN client (100ms retry) beside a PubSubLock registry with 3 goroutines, 1ms sections, 10s",
		springCols, func(f *fairRun) (metrics, error) { return f.springFor(false, registry.PubSubLock, time.Millisecond) }},
	{"alone", "the same registry alone: 3 goroutines, 200us sections, 10s",
		[]string{"registry acq/s"}, (*fairRun).alone},
	{"evicted", "a fresh lock instance beside 3 goroutines on an evicted one (one PubSubLock registry), 10s",
		[]string{"fresh acq", "fresh max wait ms", "evicted acq/s"}, (*fairRun).evicted},
	{"many-50", "50 PubSubLock registries, 1 goroutine each, 0.5ms sections, 8s",
		manyCols, func(f *fairRun) (metrics, error) { return f.many(50) }},
	{"many-200", "200 PubSubLock registries, 1 goroutine each, 0.5ms sections, 8s",
		manyCols, func(f *fairRun) (metrics, error) { return f.many(200) }},
	{"release-after", "3 PubSubLock registries looping Acquire; 1ms; ReleaseAfter(2ms), 8s",
		[]string{"acq/s", "wait p50 ms", "wait max ms"}, (*fairRun).releaseAfter},
	{"poller-2s", "a PubSubLock registry holding 30ms at a time, a SpinLock registry polling every 2s, a second PubSubLock registry, 10s",
		[]string{"utilization", "max gap ms", "poller acq", "acq/s"}, (*fairRun).poller2s},
	{"trylock", "a busy SpinLock registry (4 goroutines, 0.5ms sections) and another registry's TryLock: once, then every 150ms",
		[]string{"max gap after one TryLock ms", "acq/s alone", "acq/s with TryLock every 150ms", "TryLock cost %"}, (*fairRun).tryLock},
	{"poller-among", "a SpinLock registry (100ms poll) among two PubSubLock registries, 2 goroutines each, 1ms sections, 10s",
		[]string{"poller acq", "poller max wait ms", "acq/s"}, (*fairRun).pollerAmong},
	{"braces", "two PubSubLock registries taking turns on user:{42}, then on user-42, 5s each",
		[]string{"max wait braces ms", "max wait plain ms", "braces / plain"}, (*fairRun).braces},
	{"pubsub-4x2", "4 PubSubLock registries x 2 goroutines, 0.5ms sections, 8s",
		[]string{"acq/s", "max wait ms", "jain"}, (*fairRun).pubsub4x2},
}

var (
	springCols = []string{"spring acq", "spring max wait ms", "registry acq/s"}
	manyCols   = []string{"acq", "acq/s", "Redis CPU ms/acq", "max wait ms"}
)

func byName(name string) (scenario, bool) {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}

// fairRun is one run of a scenario in this process: the registries it
// made, each on a pool of its own, and the log of every acquisition.
type fairRun struct {
	addr   string
	prefix string
	mu     sync.Mutex
	pools  []*redigo.Pool
	regs   []*registry.Registry
	log    holdLog
}

// runFair runs the scenario name against the server at addr and returns
// its figures.
func runFair(name, addr string) (metrics, error) {
	sc, ok := byName(name)
	if !ok {
		return nil, fmt.Errorf("unknown fairness scenario %q", name)
	}
	f := &fairRun{addr: addr, prefix: fmt.Sprintf("fair%d", mono())}
	defer f.close()
	return sc.run(f)
}

func (f *fairRun) pool() *redigo.Pool {
	p := redistest.NewPool(f.addr)
	p.MaxIdle = 16
	f.mu.Lock()
	f.pools = append(f.pools, p)
	f.mu.Unlock()
	return p
}

// registry returns a new registry on a pool of its own, with the run's
// registry key.
func (f *fairRun) registry(opts ...registry.Option) (*registry.Registry, error) {
	r, err := registry.New(f.pool(), f.prefix, append([]registry.Option{registry.WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.regs = append(f.regs, r)
	f.mu.Unlock()
	return r, nil
}

func (f *fairRun) close() {
	for _, r := range f.regs {
		r.Close()
	}
	for _, p := range f.pools {
		p.Close()
	}
}

func kind(t registry.LockType) registry.Option { return registry.WithLockType(t) }

// hold is one acquisition: who (a goroutine's label), when it began to
// wait, when it held the lock and when it let it go (mono ns).
type hold struct {
	who            int
	wait, acq, rel int64
}

// holdLog collects the acquisitions of a run, and the waits that the end
// of the run cut short (acq is then the end).
type holdLog struct {
	mu    sync.Mutex
	holds []hold
	cut   []hold
}

func (h *holdLog) add(x hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

// loop runs lock; section; unlock as who until ctx ends. An unlock error
// other than a lost hold stops it.
func (f *fairRun) loop(ctx context.Context, wg *sync.WaitGroup, who int, section time.Duration,
	lock func(context.Context) error, unlock func() error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			t0 := mono()
			if err := lock(ctx); err != nil {
				if ctx.Err() != nil {
					f.log.mu.Lock()
					f.log.cut = append(f.log.cut, hold{who: who, wait: t0, acq: mono()})
					f.log.mu.Unlock()
				} else {
					time.Sleep(time.Millisecond) // an error other than the end: do not spin
				}
				continue
			}
			t1 := mono()
			time.Sleep(section)
			t2 := mono()
			if err := unlock(); err != nil && !errors.Is(err, registry.ErrLockLost) {
				return
			}
			f.log.add(hold{who: who, wait: t0, acq: t1, rel: t2})
		}
	}()
}

// lockLoop is loop on a RedisLock: LockContext, then UnlockContext.
func (f *fairRun) lockLoop(ctx context.Context, wg *sync.WaitGroup, who int, section time.Duration, l *registry.RedisLock) {
	f.loop(ctx, wg, who, section, l.LockContext, func() error { return l.UnlockContext(context.Background()) })
}

// during runs start for d, then ends the context it gave start and waits
// for the goroutines start added to wg. It returns the run's window.
func during(d time.Duration, start func(ctx context.Context, wg *sync.WaitGroup) error) (from, to int64, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	from = mono()
	if err = start(ctx, &wg); err == nil {
		time.Sleep(d)
	}
	to = mono()
	cancel()
	wg.Wait()
	return from, to, err
}

// waitFirstHold returns once the log has an acquisition (at most 5s).
func waitFirstHold(h *holdLog) {
	for end := mono() + int64(5*time.Second); mono() < end; time.Sleep(time.Millisecond) {
		h.mu.Lock()
		n := len(h.holds)
		h.mu.Unlock()
		if n > 0 {
			return
		}
	}
}

// count returns how many acquisitions who made (any, if who < 0).
func (h *holdLog) count(who int) float64 {
	n := 0
	for _, x := range h.holds {
		if who < 0 || x.who == who {
			n++
		}
	}
	return float64(n)
}

// waits returns the waits of who in ms (any, if who < 0), sorted: those
// that ended in an acquisition, and those that the end of the run cut
// short.
func (h *holdLog) waits(who int) []float64 {
	var w []float64
	for _, x := range append(slices.Clone(h.holds), h.cut...) {
		if who < 0 || x.who == who {
			w = append(w, float64(x.acq-x.wait)/ms)
		}
	}
	sort.Float64s(w)
	return w
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs)
}

// busy returns the share of [from, to) during which the lock was held, and
// the longest time in it between one hold's end and the next hold's start.
func (h *holdLog) busy(from, to int64) (share, gap float64) {
	hs := slices.Clone(h.holds)
	slices.SortFunc(hs, func(a, b hold) int { return int(a.acq - b.acq) })
	var held, maxGap, end int64 = 0, 0, from
	for _, x := range hs {
		a, r := max(x.acq, from), min(x.rel, to)
		if r <= a {
			continue
		}
		if a > end {
			maxGap = max(maxGap, a-end)
		}
		if r > end {
			held += r - max(a, end)
			end = r
		}
	}
	return float64(held) / float64(to-from), float64(maxGap) / ms
}

// perSecond returns the rate of n over [from, to).
func perSecond(n float64, from, to int64) float64 { return n / (float64(to-from) / 1e9) }

func (f *fairRun) spring(pubsub bool, t registry.LockType) (metrics, error) {
	return f.springFor(pubsub, t, 200*time.Microsecond)
}

// springFor: a Spring client beside a registry of t whose 3 goroutines,
// and the Spring client, hold the key for section at a time.
func (f *fairRun) springFor(pubsub bool, t registry.LockType, section time.Duration) (metrics, error) {
	r, err := f.registry(kind(t))
	if err != nil {
		return nil, err
	}
	l, err := r.Obtain("k")
	if err != nil {
		return nil, err
	}
	sp := newSpringClient(f.pool(), f.prefix, "k", pubsub)
	from, to, err := during(10*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		if pubsub {
			if err := sp.listen(ctx); err != nil {
				return err
			}
		}
		for g := range 3 {
			f.lockLoop(ctx, wg, g, section, l)
		}
		// Spring comes second: the registry's goroutines hold the key.
		waitFirstHold(&f.log)
		f.loop(ctx, wg, 9, section, sp.lock, sp.unlock)
		return nil
	})
	if err != nil {
		return nil, err
	}
	regAcq := f.log.count(-1) - f.log.count(9)
	return metrics{"spring acq": f.log.count(9), "spring max wait ms": maxOf(f.log.waits(9)),
		"registry acq/s": perSecond(regAcq, from, to)}, nil
}

func (f *fairRun) alone() (metrics, error) {
	r, err := f.registry(kind(registry.PubSubLock))
	if err != nil {
		return nil, err
	}
	l, err := r.Obtain("k")
	if err != nil {
		return nil, err
	}
	from, to, err := during(10*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for g := range 3 {
			f.lockLoop(ctx, wg, g, 200*time.Microsecond, l)
		}
		return nil
	})
	return metrics{"registry acq/s": perSecond(f.log.count(-1), from, to)}, err
}

// evicted: a lock instance evicted from the cache (ExpireUnusedOlderThan)
// and kept by the caller, and the fresh instance that Obtain returns next,
// on one key in one registry.
func (f *fairRun) evicted() (metrics, error) {
	r, err := f.registry(kind(registry.PubSubLock))
	if err != nil {
		return nil, err
	}
	old, err := r.Obtain("k")
	if err != nil {
		return nil, err
	}
	r.ExpireUnusedOlderThan(-1)
	fresh, err := r.Obtain("k")
	if err != nil {
		return nil, err
	}
	if fresh == old {
		return nil, errors.New("the lock was not evicted")
	}
	from, to, err := during(10*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for g := range 3 {
			f.lockLoop(ctx, wg, g, 200*time.Microsecond, old)
		}
		waitFirstHold(&f.log)
		f.lockLoop(ctx, wg, 9, 200*time.Microsecond, fresh)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return metrics{"fresh acq": f.log.count(9), "fresh max wait ms": maxOf(f.log.waits(9)),
		"evicted acq/s": perSecond(f.log.count(-1)-f.log.count(9), from, to)}, nil
}

func (f *fairRun) many(n int) (metrics, error) {
	locks := make([]*registry.RedisLock, n)
	for i := range locks {
		r, err := f.registry(kind(registry.PubSubLock))
		if err != nil {
			return nil, err
		}
		if locks[i], err = r.Obtain("k"); err != nil {
			return nil, err
		}
	}
	c, err := redigo.Dial("tcp", f.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cpu0, err := serverCPU(c)
	if err != nil {
		return nil, err
	}
	from, to, err := during(8*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for i, l := range locks {
			f.lockLoop(ctx, wg, i, 500*time.Microsecond, l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cpu1, err := serverCPU(c)
	if err != nil {
		return nil, err
	}
	acq := f.log.count(-1)
	return metrics{"acq": acq, "acq/s": perSecond(acq, from, to),
		"Redis CPU ms/acq": float64(cpu1-cpu0) / ms / math.Max(1, acq), "max wait ms": maxOf(f.log.waits(-1))}, nil
}

func (f *fairRun) releaseAfter() (metrics, error) {
	regs := make([]*registry.Registry, 3)
	for i := range regs {
		var err error
		if regs[i], err = f.registry(kind(registry.PubSubLock)); err != nil {
			return nil, err
		}
	}
	from, to, err := during(8*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for i, r := range regs {
			var lease *registry.Lease
			f.loop(ctx, wg, i, time.Millisecond, func(ctx context.Context) (err error) {
				lease, err = r.Acquire(ctx, "k", 0)
				return err
			}, func() error { return lease.ReleaseAfter(context.Background(), 2*time.Millisecond) })
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	w := f.log.waits(-1)
	return metrics{"acq/s": perSecond(f.log.count(-1), from, to), "wait p50 ms": stat.Percentile(w, 50), "wait max ms": maxOf(w)}, nil
}

func (f *fairRun) poller2s() (metrics, error) {
	a, err := f.registry(kind(registry.PubSubLock))
	if err != nil {
		return nil, err
	}
	b, err := f.registry(kind(registry.SpinLock), registry.WithIdleBetweenTries(2*time.Second))
	if err != nil {
		return nil, err
	}
	c, err := f.registry(kind(registry.PubSubLock))
	if err != nil {
		return nil, err
	}
	var ls [3]*registry.RedisLock
	for i, r := range []*registry.Registry{a, b, c} {
		if ls[i], err = r.Obtain("k"); err != nil {
			return nil, err
		}
	}
	from, to, err := during(10*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for i, l := range ls {
			f.lockLoop(ctx, wg, i, 30*time.Millisecond, l)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	share, gap := f.log.busy(from, to)
	return metrics{"utilization": share, "max gap ms": gap, "poller acq": f.log.count(1),
		"acq/s": perSecond(f.log.count(-1), from, to)}, nil
}

func (f *fairRun) tryLock() (metrics, error) {
	busy, err := f.registry(kind(registry.SpinLock))
	if err != nil {
		return nil, err
	}
	other, err := f.registry(kind(registry.SpinLock))
	if err != nil {
		return nil, err
	}
	l, err := busy.Obtain("k")
	if err != nil {
		return nil, err
	}
	tl, err := other.Obtain("k")
	if err != nil {
		return nil, err
	}
	try := func() {
		// On its own goroutine: a TryLock is one goroutine's, and a
		// success is let go at once.
		done := make(chan struct{})
		go func() {
			defer close(done)
			if tl.TryLockContext(context.Background()) == nil {
				_ = tl.UnlockContext(context.Background())
			}
		}()
		<-done
	}
	var tOnce, tEvery, tEnd int64
	from, to, err := during(9*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for g := range 4 {
			f.lockLoop(ctx, wg, g, 500*time.Microsecond, l)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepCtx(ctx, 3*time.Second) {
				return
			}
			tOnce = mono()
			try()
			if !sleepCtx(ctx, time.Second) {
				return
			}
			tEvery = mono()
			for sleepCtx(ctx, 150*time.Millisecond) {
				try()
			}
			tEnd = mono()
		}()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if tEnd == 0 {
		tEnd = to
	}
	in := func(a, b int64) float64 {
		n := 0
		for _, x := range f.log.holds {
			if x.acq >= a && x.acq < b {
				n++
			}
		}
		return float64(n)
	}
	_, gap := f.log.busy(tOnce, tOnce+int64(500*time.Millisecond))
	alone := perSecond(in(from, tOnce), from, tOnce)
	with := perSecond(in(tEvery, tEnd), tEvery, tEnd)
	return metrics{"max gap after one TryLock ms": gap, "acq/s alone": alone, "acq/s with TryLock every 150ms": with,
		"TryLock cost %": 100 * (1 - with/alone)}, nil
}

func (f *fairRun) pollerAmong() (metrics, error) {
	var ls [3]*registry.RedisLock
	for i, t := range []registry.LockType{registry.PubSubLock, registry.SpinLock, registry.PubSubLock} {
		r, err := f.registry(kind(t))
		if err != nil {
			return nil, err
		}
		if ls[i], err = r.Obtain("k"); err != nil {
			return nil, err
		}
	}
	from, to, err := during(10*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for i, l := range ls {
			for g := range 2 {
				f.lockLoop(ctx, wg, 10*i+g, time.Millisecond, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	polled := append(f.log.waits(10), f.log.waits(11)...)
	return metrics{"poller acq": f.log.count(10) + f.log.count(11), "poller max wait ms": maxOf(polled),
		"acq/s": perSecond(f.log.count(-1), from, to)}, nil
}

func (f *fairRun) braces() (metrics, error) {
	maxWait := func(key string) (float64, error) {
		f.log = holdLog{}
		var ls [2]*registry.RedisLock
		for i := range ls {
			r, err := f.registry(kind(registry.PubSubLock))
			if err != nil {
				return 0, err
			}
			if ls[i], err = r.Obtain(key); err != nil {
				return 0, err
			}
		}
		_, _, err := during(5*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
			for i, l := range ls {
				f.lockLoop(ctx, wg, i, time.Millisecond, l)
			}
			return nil
		})
		return maxOf(f.log.waits(-1)), err
	}
	b, err := maxWait("user:{42}")
	if err != nil {
		return nil, err
	}
	p, err := maxWait("user-42")
	return metrics{"max wait braces ms": b, "max wait plain ms": p, "braces / plain": b / p}, err
}

func (f *fairRun) pubsub4x2() (metrics, error) {
	var ls [4]*registry.RedisLock
	for i := range ls {
		r, err := f.registry(kind(registry.PubSubLock))
		if err != nil {
			return nil, err
		}
		if ls[i], err = r.Obtain("k"); err != nil {
			return nil, err
		}
	}
	from, to, err := during(8*time.Second, func(ctx context.Context, wg *sync.WaitGroup) error {
		for i, l := range ls {
			for g := range 2 {
				f.lockLoop(ctx, wg, 10*i+g, 500*time.Microsecond, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var counts []float64
	for i := range ls {
		for g := range 2 {
			counts = append(counts, f.log.count(10*i+g))
		}
	}
	return metrics{"acq/s": perSecond(f.log.count(-1), from, to), "max wait ms": maxOf(f.log.waits(-1)), "jain": stat.Jain(counts)}, nil
}

// serverCPU returns used_cpu_sys + used_cpu_user of INFO cpu.
func serverCPU(c redigo.Conn) (time.Duration, error) {
	s, err := redigo.String(c.Do("INFO", "cpu"))
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// mono returns a monotonic clock reading in ns.
func mono() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

const ms = 1e6 // ns per ms

// metrics are one run's figures by name.
type metrics map[string]float64
