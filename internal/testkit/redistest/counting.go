package redistest

import (
	"context"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Pool is the interface of registry.Pool, repeated to avoid an import cycle.
type Pool interface {
	GetContext(ctx context.Context) (redis.Conn, error)
}

// CountingPool wraps a Pool and records the name of every command sent
// through the connections it hands out.
type CountingPool struct {
	Pool Pool
	// mu guards cmds.
	mu   sync.Mutex
	cmds []string
}

// GetContext gets a connection from the wrapped pool and wraps it.
func (p *CountingPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, pool: p}, nil
}

// Commands returns the commands sent so far and forgets them.
func (p *CountingPool) Commands() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cmds
	p.cmds = nil
	return c
}

func (p *CountingPool) record(cmd string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmds = append(p.cmds, cmd)
}

type countingConn struct {
	redis.Conn
	pool *CountingPool
}

func (c *countingConn) Do(cmd string, args ...any) (any, error) {
	c.pool.record(cmd)
	return c.Conn.Do(cmd, args...)
}

// Send records a pipelined command (the watchdog's batches, the native
// release).
func (c *countingConn) Send(cmd string, args ...any) error {
	c.pool.record(cmd)
	return c.Conn.Send(cmd, args...)
}

func (c *countingConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	c.pool.record(cmd)
	return redis.DoContext(c.Conn, ctx, cmd, args...)
}

func (c *countingConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	c.pool.record(cmd)
	return redis.DoWithTimeout(c.Conn, d, cmd, args...)
}

func (c *countingConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, d)
}

func (c *countingConn) ReceiveContext(ctx context.Context) (any, error) {
	return redis.ReceiveContext(c.Conn, ctx)
}
