package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"golang.org/x/sys/unix"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// Scenario 18: a semaphore under faults. Three processes, each with a
// PubSubLock and a SpinLock registry of four goroutines, take permits of
// one fenced semaphore of 3 and write to a resource that counts the writers
// inside. The resource's fence admits a write only if its token is among
// the highest `permits` tokens it has seen: a holder whose permit was
// given on to newer holders is refused.
//   - no fault: never more than 3 writers inside;
//   - CLIENT KILL of every client connection every 150 ms: the same;
//   - a Redis restart without persistence (every permit and the fence
//     counter lost): the processes carry on, and tokens after it exceed
//     every token before it;
//   - a holder SIGKILLed: its permit back within its TTL and a poll;
//   - a holder SIGSTOPped past its TTL: resumed, it sees Lost before its
//     next write, and that write is refused.

const semPermits = 3

// semFenceSrc is the resource of a semaphore: KEYS tokens (the highest
// ARGV[2] tokens seen), occupancy, peak, refused, over the limit.
const semFenceSrc = `
local n = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(n + 1))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('INCR', KEYS[4])
  return 0
end
local occ = redis.call('INCR', KEYS[2])
if occ > tonumber(redis.call('GET', KEYS[3]) or '0') then redis.call('SET', KEYS[3], occ) end
if occ > n then redis.call('INCR', KEYS[5]) end
return 1`

var semFence = redis.NewScript(5, semFenceSrc)

func semFenceKeys() []any {
	return []any{"sem:tokens", "sem:occ", "sem:peak", "sem:refused", "sem:over"}
}

// semArgs configures a semaphore child.
type semArgs struct {
	Addr, Res, Prefix string
	Permits           int
	TTL, Deadline     time.Duration
}

func semRegistry(a semArgs, pool *redis.Pool, spin bool) (*registry.Registry, error) {
	opts := []registry.Option{registry.WithFencing(), registry.WithAutoRenew(), registry.WithExpireAfter(a.TTL)}
	if spin {
		opts = append(opts, registry.WithIdleBetweenTries(20*time.Millisecond))
	} else {
		opts = append(opts, registry.WithLockType(registry.PubSubLock))
	}
	return registry.New(pool, a.Prefix, opts...)
}

// fourEach runs, on each of two registries of a (semRegistry's PubSubLock
// and SpinLock), the body that each returns for it in four goroutines,
// and returns once they all end; the registries are closed then. A
// registry or body that cannot be made is an error.
func fourEach(a semArgs, pool *redis.Pool, each func(r *registry.Registry) (func(), error)) error {
	var (
		wg   sync.WaitGroup
		regs []*registry.Registry
	)
	defer func() { // the goroutines end before their registries close
		wg.Wait()
		for _, r := range regs {
			r.Close()
		}
	}()
	for i := range 2 {
		r, err := semRegistry(a, pool, i == 1)
		if err != nil {
			return err
		}
		regs = append(regs, r)
		body, err := each(r)
		if err != nil {
			return err
		}
		for range 4 {
			wg.Go(body)
		}
	}
	return nil
}

// semContend is a child: two registries of four goroutines each take
// permits until Deadline, write to the resource while they hold one, and
// report their counts.
func semContend(a semArgs) error {
	pool, res := newPool(a.Addr), newPool(a.Res)
	defer pool.Close()
	defer res.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.Deadline)
	defer cancel()
	var acquired, written, refused, lost, errs atomic.Int64
	err := fourEach(a, pool, func(r *registry.Registry) (func(), error) {
		s, err := r.Semaphore("exports", a.Permits)
		if err != nil {
			return nil, err
		}
		return func() {
			c := res.Get()
			defer c.Close()
			for ctx.Err() == nil {
				le, err := s.Acquire(ctx, 0)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				acquired.Add(1)
				select {
				case <-le.Lost(): // checked right before the write
					lost.Add(1)
				default:
					ok, err := redis.Int(semFence.Do(c, append(semFenceKeys(), le.Token(), a.Permits)...))
					switch {
					case err != nil:
						errs.Add(1)
					case ok == 1:
						written.Add(1)
						time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond)
						_, _ = c.Do("DECR", "sem:occ")
					default:
						refused.Add(1)
					}
				}
				countRelease(le, &lost, &errs)
			}
		}, nil
	})
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "done", "acquired": acquired.Load(), "written": written.Load(), "refused": refused.Load(),
		"lost": lost.Load(), "errors": errs.Load()})
	return nil
}

// semHold is a child: it holds one permit of a fenced one-permit semaphore,
// renewed, until it sees Lost; then it writes to the resource once.
func semHold(a semArgs) error {
	pool, res := newPool(a.Addr), newPool(a.Res)
	defer pool.Close()
	defer res.Close()
	r, err := semRegistry(a, pool, false)
	if err != nil {
		return err
	}
	defer r.Close()
	s, err := r.Semaphore("exports", 1)
	if err != nil {
		return err
	}
	le, err := s.Acquire(context.Background(), 0)
	if err != nil {
		return err
	}
	emit(map[string]any{"event": "held", "token": le.Token()})
	for {
		select {
		case <-le.Lost():
			emit(map[string]any{"event": "lost", "at": mono()})
			c := res.Get()
			ok, err := redis.Int(semFence.Do(c, append(semFenceKeys(), le.Token(), 1)...))
			c.Close()
			emit(map[string]any{"event": "write", "accepted": ok == 1, "err": fmt.Sprint(err)})
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// semRun runs three contending processes for d while fault runs, and
// returns their summed counts and the resource's peak and over-limit
// entries.
func semRun(t *testing.T, srvAddr, resAddr, prefix string, d time.Duration, fault func(stop <-chan struct{})) (sum map[string]int64, peak, over int) {
	t.Helper()
	sum = runChildren(t, "semcontend", semArgs{Addr: srvAddr, Res: resAddr, Prefix: prefix, Permits: semPermits, TTL: time.Second, Deadline: d},
		fault, "acquired", "written", "refused", "lost", "errors")
	peak, _ = redis.Int(do(t, resAddr, "GET", "sem:peak"), nil)
	over, _ = redis.Int(do(t, resAddr, "GET", "sem:over"), nil)
	return sum, peak, over
}

// permitsBack checks that every permit can be taken within ttl + poll of
// the end of the faults: none is lost for longer than its TTL.
func permitsBack(t *testing.T, addr, prefix string, ttl time.Duration) time.Duration {
	t.Helper()
	r := newRegistry(t, newPool(addr), prefix, registry.WithFencing(), registry.WithIdleBetweenTries(20*time.Millisecond))
	s, err := r.Semaphore("exports", semPermits)
	mustNil(t, err)
	start := time.Now()
	ctx := ctxFor(t, ttl+2*time.Second)
	var leases []*registry.Lease
	for range semPermits {
		le, err := s.Acquire(ctx, 0)
		mustNil(t, err)
		leases = append(leases, le)
	}
	took := time.Since(start)
	for _, le := range leases {
		mustNil(t, le.Release(ctxFor(t, time.Second)))
	}
	return took
}

func TestSemaphoreFaults(t *testing.T) {
	const d = 3 * time.Second
	t.Run("no fault", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		sum, peak, over := semRun(t, srv.Addr, res.Addr, "chaos18a", d, func(<-chan struct{}) {})
		if over != 0 || peak > semPermits || sum["written"] == 0 {
			t.Fatalf("no fault: %v, peak %d, %d entries over the limit of %d", sum, peak, over, semPermits)
		}
		back := permitsBack(t, srv.Addr, "chaos18a", time.Second)
		figure(t, 18, "semaphore of %d, 3 processes x 8 goroutines, no fault, %v: %d acquisitions, %d writes, peak %d inside, %d over the limit, %d refused; every permit free again after %s",
			semPermits, d, sum["acquired"], sum["written"], peak, over, sum["refused"], ms(back))
	})
	t.Run("client kill", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		var kills atomic.Int64
		sum, peak, over := semRun(t, srv.Addr, res.Addr, "chaos18b", d, every(srv.Addr, &kills, "CLIENT", "KILL", "TYPE", "normal"))
		if over != 0 || sum["written"] == 0 {
			t.Fatalf("client kill: %v, peak %d, %d entries over the limit of %d", sum, peak, over, semPermits)
		}
		back := permitsBack(t, srv.Addr, "chaos18b", time.Second)
		figure(t, 18, "semaphore of %d under CLIENT KILL every 150 ms (%d rounds), %v: %d acquisitions, %d writes, peak %d inside, %d over the limit, %d lost, %d errors; every permit free again after %s (TTL 1s)",
			semPermits, kills.Load(), d, sum["acquired"], sum["written"], peak, over, sum["lost"], sum["errors"], ms(back))
	})
	t.Run("restart", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		var before int64
		sum, peak, over := semRun(t, srv.Addr, res.Addr, "chaos18c", d, func(stop <-chan struct{}) {
			time.Sleep(d / 2)
			before, _ = redis.Int64(redistest.Do(srv.Addr, "GET", "{chaos18c:exports}:fence"))
			if err := srv.Restart(); err != nil {
				t.Error(err)
			}
		})
		if sum["written"] == 0 || before == 0 {
			t.Fatalf("restart: %v, fence before %d", sum, before)
		}
		back := permitsBack(t, srv.Addr, "chaos18c", time.Second)
		after, _ := redis.Int64(do(t, srv.Addr, "GET", "{chaos18c:exports}:fence"), nil)
		if after != 0 && after <= before {
			t.Fatalf("the fence counter is %d after the restart, not above %d before it", after, before)
		}
		figure(t, 18, "semaphore of %d, Redis restarted without persistence mid-run: %d acquisitions, %d writes, %d refused by the fence, %d lost, %d errors, peak %d inside (%d over the limit, while holders of lost permits ran on); fence %d before, above it after; every permit free again after %s",
			semPermits, sum["acquired"], sum["written"], sum["refused"], sum["lost"], sum["errors"], peak, over, before, ms(back))
	})
	t.Run("SIGKILL", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		const ttl, idle = time.Second, 20 * time.Millisecond
		h := spawn(t, "semhold", semArgs{Addr: srv.Addr, Res: res.Addr, Prefix: "chaos18d", TTL: ttl})
		h.event(t, 10*time.Second, "held")
		time.Sleep(ttl / 2) // renewed at least once
		mustNil(t, h.cmd.Process.Kill())
		killed := time.Now()
		r := newRegistry(t, newPool(srv.Addr), "chaos18d", registry.WithFencing(), registry.WithIdleBetweenTries(idle))
		s, err := r.Semaphore("exports", 1)
		mustNil(t, err)
		le, err := s.Acquire(ctxFor(t, 10*time.Second), 0)
		mustNil(t, err)
		took := time.Since(killed)
		mustNil(t, le.Release(ctxFor(t, time.Second)))
		if took > ttl+idle+100*time.Millisecond {
			t.Fatalf("the killed holder's permit came back %v after the kill, want within TTL %v + poll %v", took, ttl, idle)
		}
		figure(t, 18, "semaphore: a SIGKILLed holder's permit (TTL %v, renewed) taken again %s after the kill (bound TTL + poll %v)", ttl, ms(took), idle)
	})
	t.Run("SIGSTOP", func(t *testing.T) {
		srv, res := startServer(t), startServer(t)
		const ttl = 900 * time.Millisecond
		h := spawn(t, "semhold", semArgs{Addr: srv.Addr, Res: res.Addr, Prefix: "chaos18e", TTL: ttl})
		h.event(t, 10*time.Second, "held")
		mustNil(t, h.cmd.Process.Signal(unix.SIGSTOP))
		r := newRegistry(t, newPool(srv.Addr), "chaos18e", registry.WithFencing())
		s, err := r.Semaphore("exports", 1)
		mustNil(t, err)
		le, err := s.Acquire(ctxFor(t, 10*time.Second), 0)
		mustNil(t, err)
		c := newPool(res.Addr).Get()
		ok, err := redis.Int(semFence.Do(c, append(semFenceKeys(), le.Token(), 1)...))
		c.Close()
		if err != nil || ok != 1 {
			t.Fatalf("the new holder's write: %d, %v", ok, err)
		}
		resumed := mono()
		mustNil(t, h.cmd.Process.Signal(unix.SIGCONT))
		lostAt := h.event(t, 5*time.Second, "lost")
		learned := time.Duration(int64(lostAt["at"].(float64)) - resumed)
		if w := h.event(t, 5*time.Second, "write"); w["accepted"] != false {
			t.Fatalf("the resumed holder's write was accepted: %v", w)
		}
		mustNil(t, le.Release(ctxFor(t, time.Second)))
		figure(t, 18, "semaphore: a holder SIGSTOPped past its TTL (%v): resumed, it saw Lost %s after SIGCONT, and its fenced write was refused", ttl, ms(learned))
	})
}
