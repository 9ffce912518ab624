package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Redis keys of the order.
const (
	stockKey = "oversell:order-42:stock"
	soldKey  = "oversell:order-42:sold"
)

// thinkTime is the pause between reading the stock and writing it back: the
// window in which unlocked buyers oversell.
const thinkTime = 2 * time.Millisecond

// maxAttempts bounds each buyer's loop.
const maxAttempts = 10_000

func newPool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle: 16, MaxActive: 64, Wait: true,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialConnectTimeout(2*time.Second),
				redis.DialReadTimeout(5*time.Second), redis.DialWriteTimeout(5*time.Second))
		},
	}
}

func reset(addr string, stock int) error {
	pool := newPool(addr)
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("SET", stockKey, stock); err != nil {
		return err
	}
	_, err := c.Do("SET", soldKey, 0)
	return err
}

func readResult(addr string) (sold, left int, err error) {
	pool := newPool(addr)
	defer pool.Close()
	c := pool.Get()
	defer c.Close()
	vals, err := redis.Ints(c.Do("MGET", soldKey, stockKey))
	if err != nil {
		return 0, 0, err
	}
	return vals[0], vals[1], nil
}

// work runs buyers goroutines that buy until the stock reads 0.
func work(addr string, locked bool, buyers int) error {
	pool := newPool(addr)
	defer pool.Close()
	reg, err := registry.New(pool, "oversell", registry.WithExpireAfter(10*time.Second),
		registry.WithIdleBetweenTries(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer reg.Close()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range maxAttempts {
				var (
					more bool
					err  error
				)
				if locked {
					err = reg.ExecuteLocked(context.Background(), "order-42", func(context.Context) error {
						more, err = buy(pool)
						return err
					})
				} else {
					more, err = buy(pool)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// buy reads the stock, thinks, and writes it back one lower: a read-modify-
// write that is only correct under a lock. It reports whether stock remains.
func buy(pool *redis.Pool) (more bool, err error) {
	c := pool.Get()
	defer c.Close()
	stock, err := redis.Int(c.Do("GET", stockKey))
	if err != nil || stock <= 0 {
		return false, err
	}
	time.Sleep(thinkTime) // the buyer's business logic
	if _, err := c.Do("SET", stockKey, stock-1); err != nil {
		return false, err
	}
	_, err = c.Do("INCR", soldKey)
	return stock > 1, err
}
