package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// spec is one load run in one process: goroutine g cycles over Keys[g].
type spec struct {
	Impl      string
	Addr      string // lock server
	CheckAddr string // counter server for the mutual-exclusion check; "" for none
	Proc      int
	Keys      [][]string
	Start     int64 // mono time at which every goroutine starts
	End       int64 // mono time after which no new wait starts
}

// rec is one acquisition. Wait..Acq is the wait, Acq..Rel the critical
// section (the checker's GET and SET), Rel..Done the unlock.
type rec struct {
	Proc, G int
	Key     string
	Wait    int64
	Acq     int64
	Rel     int64
	Done    int64
}

// result is what one process reports for a run.
type result struct {
	Recs     []rec
	Writes   int64 // round trips to the lock server
	Cmds     int64 // commands sent to the lock server
	Errors   int64
	FirstErr string
}

// work runs sp in this process.
func work(sp spec) (result, error) {
	im, ok := implByName(sp.Impl)
	if !ok {
		return result{}, fmt.Errorf("unknown impl %q", sp.Impl)
	}
	var ctr counter
	cl, err := im.open(sp.Addr, &ctr)
	if err != nil {
		return result{}, err
	}
	defer cl.close()
	gs := make([]*goroutineRun, len(sp.Keys))
	for g, keys := range sp.Keys {
		if gs[g], err = newGoroutineRun(cl, sp, g, keys); err != nil {
			return result{}, err
		}
		defer gs[g].close()
	}
	warm(cl, sp.Proc, len(gs))
	time.Sleep(time.Duration(sp.Start - mono()))
	w0, c0 := ctr.snapshot()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(sp.End-mono()))
	defer cancel()
	var wg sync.WaitGroup
	for _, gr := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gr.loop(ctx, sp.End)
		}()
	}
	wg.Wait()
	w1, c1 := ctr.snapshot()
	res := result{Writes: w1 - w0, Cmds: c1 - c0}
	for _, gr := range gs {
		res.Recs = append(res.Recs, gr.recs...)
		res.Errors += gr.errors
		if res.FirstErr == "" && gr.firstErr != nil {
			res.FirstErr = gr.firstErr.Error()
		}
	}
	return res, nil
}

// warm opens the connections a run needs (and pays the clients' connection
// handshakes) before counting starts: n goroutines lock private keys at once.
func warm(cl client, proc, n int) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lk, err := cl.locker(fmt.Sprintf("warm:%d:%d:%d", proc, g, mono()))
			if err == nil && lk.lock(context.Background()) == nil {
				_ = lk.unlock(context.Background())
			}
		}()
	}
	wg.Wait()
}

// goroutineRun is one goroutine's part of a run.
type goroutineRun struct {
	proc, g  int
	keys     []string
	lks      []locker
	check    redigo.Conn
	recs     []rec
	errors   int64
	firstErr error
}

func newGoroutineRun(cl client, sp spec, g int, keys []string) (*goroutineRun, error) {
	gr := &goroutineRun{proc: sp.Proc, g: g, keys: keys}
	for _, k := range keys {
		lk, err := cl.locker(k)
		if err != nil {
			return nil, err
		}
		gr.lks = append(gr.lks, lk)
	}
	if sp.CheckAddr != "" {
		c, err := redigo.Dial("tcp", sp.CheckAddr)
		if err != nil {
			return nil, err
		}
		gr.check = c
	}
	return gr, nil
}

func (gr *goroutineRun) close() {
	if gr.check != nil {
		_ = gr.check.Close()
	}
}

func (gr *goroutineRun) fail(err error) {
	gr.errors++
	if gr.firstErr == nil {
		gr.firstErr = err
	}
}

// loop locks, bumps the checker's counter non-atomically, and unlocks, until
// end. A wait cut by the end of the run is not an acquisition.
func (gr *goroutineRun) loop(ctx context.Context, end int64) {
	for i := 0; mono() < end; i++ {
		k := i % len(gr.keys)
		t0 := mono()
		if err := gr.lks[k].lock(ctx); err != nil {
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			gr.fail(err)
			continue
		}
		t1 := mono()
		if gr.check != nil {
			n, err := redigo.Int(gr.check.Do("GET", gr.keys[k]))
			if err != nil && err != redigo.ErrNil {
				gr.fail(err)
			}
			if _, err := gr.check.Do("SET", gr.keys[k], n+1); err != nil {
				gr.fail(err)
			}
		}
		t2 := mono()
		if err := gr.lks[k].unlock(context.Background()); err != nil {
			gr.fail(err)
		}
		gr.recs = append(gr.recs, rec{Proc: gr.proc, G: gr.g, Key: gr.keys[k], Wait: t0, Acq: t1, Rel: t2, Done: mono()})
	}
}
