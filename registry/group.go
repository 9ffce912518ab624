package registry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// group owns a registry's background goroutines (the watchdog, the
// subscriber, best-effort releases) and its shutdown. Close closes closed,
// cancels ctx and waits for every goroutine started with spawn.
type group struct {
	closed chan struct{}
	// ctx bounds the Redis calls of background goroutines; close cancels
	// it, so Close does not wait for a server that is down.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards the following: no goroutine is added once closed is
	// closed, so wg.Wait in close cannot race wg.Add.
	mu   sync.Mutex
	done bool
	wg   sync.WaitGroup
}

func newGroup() *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{closed: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// isClosed reports whether close was called.
func (g *group) isClosed() bool {
	select {
	case <-g.closed:
		return true
	default:
		return false
	}
}

// spawn runs fn in a goroutine that close waits for, unless the group is
// closed; it reports whether fn was started.
func (g *group) spawn(fn func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
	return true
}

// startOnce spawns fn the first time it is called with started. Later
// calls cost one atomic load: it is on the path of every acquisition.
func (g *group) startOnce(started *atomic.Bool, fn func()) {
	if started.Load() || !started.CompareAndSwap(false, true) {
		return
	}
	g.spawn(fn)
}

// close stops the group and waits for its goroutines. It is idempotent.
func (g *group) close() {
	g.mu.Lock()
	if !g.done {
		g.done = true
		close(g.closed)
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// sleep waits for d, or until wake yields (a nil wake never does), ctx is
// done (ctx.Err()) or the group is closed (ErrClosed).
func (g *group) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closed:
		return ErrClosed
	}
}
