package core

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
	Closed chan struct{}
	// Ctx bounds the Redis calls of background goroutines; close cancels
	// it, so Close does not wait for a server that is down.
	Ctx    context.Context
	cancel context.CancelFunc

	// mu guards the following: no goroutine is added once closed is
	// closed, so wg.Wait in close cannot race wg.Add.
	mu   sync.Mutex
	done bool
	wg   sync.WaitGroup
}

func NewGroup() *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{Closed: make(chan struct{}), Ctx: ctx, cancel: cancel}
}

// IsClosed reports whether close was called.
func (g *group) IsClosed() bool {
	select {
	case <-g.Closed:
		return true
	default:
		return false
	}
}

// Spawn runs fn in a goroutine that close waits for, unless the group is
// closed; it reports whether fn was started.
func (g *group) Spawn(fn func()) bool {
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

// StartOnce spawns fn the first time it is called with started. Later
// calls cost one atomic load: it is on the path of every acquisition.
func (g *group) StartOnce(started *atomic.Bool, fn func()) {
	if started.Load() || !started.CompareAndSwap(false, true) {
		return
	}
	g.Spawn(fn)
}

// Close stops the group and waits for its goroutines. It is idempotent.
func (g *group) Close() {
	g.mu.Lock()
	if !g.done {
		g.done = true
		close(g.Closed)
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// Sleep waits for d, or until wake yields (a nil wake never does), ctx is
// done (ctx.Err()) or the group is closed (ErrClosed).
func (g *group) Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.Closed:
		return ErrClosed
	}
}
