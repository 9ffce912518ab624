package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// semRoles are the roles of scenarios 18-20, whose arguments are semArgs.
var semRoles = map[string]func(semArgs) error{
	"semcontend": semContend, "semhold": semHold,
	"rwcontend": rwContend, "rwhold": rwHold,
	"multicontend": multiContend, "multihold": multiHold,
}

// runChild runs the role of a re-executed test binary and returns its exit
// code. Its arguments come as JSON in LOCKYARD_CHAOS_ARGS; it reports
// events as JSON lines on stdout.
func runChild(role string) int {
	args := []byte(os.Getenv("LOCKYARD_CHAOS_ARGS"))
	var err error
	switch f, ok := semRoles[role]; {
	case ok:
		var a semArgs
		if err = json.Unmarshal(args, &a); err == nil {
			err = f(a)
		}
	case role == "contend":
		var a contendArgs
		if err = json.Unmarshal(args, &a); err == nil {
			err = contend(a)
		}
	case role == "hold":
		var a holdArgs
		if err = json.Unmarshal(args, &a); err == nil {
			err = holdRole(a)
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		return 1
	}
	return 0
}

// contendArgs configures a contending process: Regs registries of
// Goroutines goroutines each, over Keys keys, until the process has made
// Quota acquisitions or Deadline passed.
type contendArgs struct {
	Addr, Res, Prefix, Out, Proc string
	Keys, Regs, Goroutines       int
	Quota                        int64
	Deadline                     time.Duration
}

func contend(a contendArgs) error {
	out, err := os.Create(a.Out)
	if err != nil {
		return err
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	var (
		outMu                            sync.Mutex
		started, done, lockErrs, unlockE atomic.Int64
		rejected, resErrs, leases        atomic.Int64
		wg                               sync.WaitGroup
	)
	res := resource{a.Res}
	ctx, cancel := context.WithTimeout(context.Background(), a.Deadline)
	defer cancel()
	var regs []*registry.Registry
	for i := range a.Regs {
		opts := []registry.Option{registry.WithFencing(), registry.WithExpireAfter(5 * time.Second)}
		if i%2 == 0 {
			opts = append(opts, registry.WithLockType(registry.PubSubLock))
		} else {
			opts = append(opts, registry.WithAutoRenew(), registry.WithIdleBetweenTries(20*time.Millisecond))
		}
		pool := newPool(a.Addr)
		defer pool.Close()
		r, err := registry.New(pool, a.Prefix, opts...)
		if err != nil {
			return err
		}
		defer r.Close()
		regs = append(regs, r)
	}
	for i := range a.Regs * a.Goroutines {
		r := regs[i%a.Regs]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := redis.Dial("tcp", a.Res)
			if err != nil {
				resErrs.Add(1)
				return
			}
			defer rc.Close()
			// Every fourth goroutine takes leases, and a goroutine of its
			// own does the fenced work and releases them.
			var releaser *leaseReleaser
			if i%4 == 3 {
				releaser = newLeaseReleaser()
				defer releaser.stop()
			}
			fenced := func(key string, token int64) {
				ok, err := res.enter(rc, key, token)
				switch {
				case err != nil:
					resErrs.Add(1)
				case !ok:
					rejected.Add(1)
				default:
					if res.leave(rc, key) != nil {
						resErrs.Add(1)
					}
				}
			}
			for started.Add(1) <= a.Quota && ctx.Err() == nil {
				key := "k" + strconv.Itoa(rand.IntN(a.Keys))
				var iv interval
				if releaser != nil {
					le, err := r.Acquire(ctx, key, 0)
					if err != nil {
						if ctx.Err() == nil {
							lockErrs.Add(1)
						}
						continue
					}
					iv = interval{Key: key, Proc: a.Proc, Token: le.Token(), Acquired: mono(), Lease: true}
					if err := releaser.run(le, func() { fenced(key, iv.Token); iv.Released = mono() }); err != nil {
						unlockE.Add(1)
					}
					leases.Add(1)
				} else {
					l, err := r.Obtain(key)
					if err != nil {
						lockErrs.Add(1)
						continue
					}
					if err := l.LockContext(ctx); err != nil {
						if ctx.Err() == nil {
							lockErrs.Add(1)
						}
						continue
					}
					iv = interval{Key: key, Proc: a.Proc, Token: l.Token(), Acquired: mono()}
					fenced(key, iv.Token)
					iv.Released = mono()
					if err := l.UnlockContext(context.Background()); err != nil {
						unlockE.Add(1)
					}
				}
				done.Add(1)
				js, _ := json.Marshal(iv)
				outMu.Lock()
				w.Write(append(js, '\n'))
				outMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := w.Flush(); err != nil {
		return err
	}
	emit(map[string]any{"event": "done", "acquisitions": done.Load(), "lockErrors": lockErrs.Load(),
		"unlockErrors": unlockE.Load(), "rejected": rejected.Load(), "resourceErrors": resErrs.Load(),
		"leases": leases.Load()})
	return nil
}

// leaseReleaser is a goroutine that does the work of leases that another
// goroutine acquired, and releases them.
type leaseReleaser struct {
	jobs chan leaseJob
	done chan struct{}
}

type leaseJob struct {
	le   *registry.Lease
	work func()
	errc chan error
}

func newLeaseReleaser() *leaseReleaser {
	lr := &leaseReleaser{jobs: make(chan leaseJob), done: make(chan struct{})}
	go func() {
		defer close(lr.done)
		for j := range lr.jobs {
			j.work()
			j.errc <- j.le.Release(context.Background())
		}
	}()
	return lr
}

// run has the releaser goroutine do work under le and release it, and
// returns the release's error.
func (lr *leaseReleaser) run(le *registry.Lease, work func()) error {
	errc := make(chan error, 1)
	lr.jobs <- leaseJob{le, work, errc}
	return <-errc
}

func (lr *leaseReleaser) stop() {
	close(lr.jobs)
	<-lr.done
}

// holdArgs configures a holder process: it takes Key, reports "held",
// waits for its loss (the parent kills, or stops and resumes, it), then
// reports "lost", its fenced write and its unlock.
type holdArgs struct {
	Addr, Res, Prefix, Key    string
	TTL                       time.Duration
	AutoRenew, Fencing, Lease bool // Lease: hold a lease, released by another goroutine
}

// held is what holdRole holds: a lock, or a lease.
type held interface {
	Token() int64
	Lost() <-chan struct{}
}

func holdRole(a holdArgs) error {
	opts := []registry.Option{registry.WithExpireAfter(a.TTL)}
	if a.AutoRenew {
		opts = append(opts, registry.WithAutoRenew())
	}
	if a.Fencing {
		opts = append(opts, registry.WithFencing())
	}
	pool := newPool(a.Addr)
	defer pool.Close()
	r, err := registry.New(pool, a.Prefix, opts...)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		l       held
		release func() error
	)
	if a.Lease {
		le, err := r.Acquire(ctx, a.Key, 0)
		if err != nil {
			return err
		}
		l = le
		release = func() error { // from another goroutine
			errc := make(chan error, 1)
			go func() { errc <- le.Release(context.Background()) }()
			return <-errc
		}
	} else {
		lk, err := r.Obtain(a.Key)
		if err != nil {
			return err
		}
		if err := lk.LockContext(ctx); err != nil {
			return err
		}
		l, release = lk, func() error { return lk.UnlockContext(context.Background()) }
	}
	token := l.Token()
	emit(map[string]any{"event": "held", "token": token, "at": mono()})
	select {
	case <-l.Lost():
	case <-time.After(time.Minute):
		return errors.New("the hold was not lost within a minute")
	}
	emit(map[string]any{"event": "lost", "at": mono()})
	if a.Res != "" {
		rc, err := redis.Dial("tcp", a.Res)
		if err != nil {
			return err
		}
		defer rc.Close()
		ok, err := resource{a.Res}.enter(rc, a.Key, token)
		if err != nil {
			return err
		}
		emit(map[string]any{"event": "write", "accepted": ok})
	}
	err = release()
	emit(map[string]any{"event": "unlock", "lost": errors.Is(err, registry.ErrLockLost), "err": fmt.Sprint(err)})
	return nil
}
