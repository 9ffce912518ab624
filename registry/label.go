package registry

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/lockyard/lockyard/internal/core"
)

// A registry publishes its label before its first attempt in Redis, at
// its label key (wire.Layout.LabelKey: one per registry, not per
// acquisition), and again every labelEvery until Close, each time for
// labelTTL: the label of a registry that is gone expires labelTTL after
// its last publication at most.
const (
	labelTTL   = 10 * time.Minute
	labelEvery = labelTTL / 3
)

// labelWait bounds the first publication of a label, which the first
// attempt of the registry waits for (before its obtain is sent, so that
// it never shortens a hold's validity); a publication that failed is tried
// again in the background a second later, then after twice as long each
// time, up to labelEvery (an ACL that refuses the label key costs a
// refused write every few minutes).
const labelWait = 200 * time.Millisecond

// labelBudget is the least time left to a caller's ctx for its first
// attempt to wait for the label: a shorter one is the obtain's.
const labelBudget = 5 * labelWait

// labeller publishes a registry's label (WithLabel) at its label key.
type labeller struct {
	c          *core.Core
	key, label string
	started    atomic.Bool // the first publication was made
	written    atomic.Bool // a publication succeeded: the label is in Redis
}

// publish publishes the label the first time it is called, and starts the
// goroutine that renews it. The caller is about to make the registry's
// first attempt in Redis: it waits for the publication, within labelWait,
// unless its ctx has less than labelBudget left (then the goroutine
// publishes it at once, and nobody waits). Close cuts the wait short.
func (lb *labeller) publish(ctx context.Context) {
	if lb.started.Load() || !lb.started.CompareAndSwap(false, true) {
		return
	}
	ok, waited := false, false
	if dl, has := ctx.Deadline(); !has || time.Until(dl) >= labelBudget {
		wctx, cancel := context.WithTimeout(ctx, labelWait)
		stop := context.AfterFunc(lb.c.BG.Ctx, cancel)
		ok, waited = lb.write(wctx), true
		stop()
		cancel()
	}
	lb.c.BG.Spawn(func() {
		if !waited {
			ok = lb.write(lb.c.BG.Ctx)
		}
		retry := time.Second // after a failure: doubled up to labelEvery
		for {
			d := labelEvery
			if !ok {
				d, retry = retry, min(2*retry, labelEvery)
			}
			if lb.c.BG.Sleep(context.Background(), d, nil) != nil {
				return
			}
			ok = lb.write(lb.c.BG.Ctx)
		}
	})
}

// write sets the label key for labelTTL, and reports whether it did. A
// failure is logged at debug level: labels are advisory.
func (lb *labeller) write(ctx context.Context) bool {
	call := core.Call{Keys: []string{lb.key}, Args: []any{lb.label, labelTTL.Milliseconds()}}
	ok := true
	for _, res := range lb.c.Exec.Eval(ctx, 0, labelScript, call) {
		if res.Err != nil {
			ok = false
			lb.c.Log.Debug("lockyard: label not published", "err", res.Err)
		}
	}
	if ok {
		lb.written.Store(true)
	}
	return ok
}

// lost reports whether the server lost the label that a publication wrote
// (core.Core.ServerLost): the label lives labelTTL and is renewed every
// labelEvery, so it is gone only when the server lost its keys (a restart
// without persistence, a failover to a replica without it, FLUSHALL), or
// after the registry could not renew it for minutes. Unknown (never
// written, or no answer) is false.
func (lb *labeller) lost(ctx context.Context) bool {
	if !lb.written.Load() {
		return false
	}
	for _, res := range lb.c.Exec.Eval(ctx, 0, labelScript, core.Call{Keys: []string{lb.key}}) {
		if res.Err == nil && res.Reply == nil {
			return true
		}
	}
	return false
}
