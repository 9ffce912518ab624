// Command locker shows existing code written against sync.Locker switched
// from a sync.Mutex to a *registry.RedisLock, with no other change.
//
// Inventory guards a read-modify-write of a stock count kept in Redis with
// whatever sync.Locker it is given. Two replicas of a service each have
// their own Inventory. With a sync.Mutex each replica excludes only its own
// goroutines, and the two together sell more than the stock. With the
// RedisLock of one key they exclude each other, and the stock comes out
// exact.
package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Inventory is code that predates lockyard: it takes any sync.Locker.
type Inventory struct {
	mu   sync.Locker
	pool *redis.Pool
}

// Reserve takes one item if any is left and reports whether it did.
func (inv *Inventory) Reserve() (bool, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	c := inv.pool.Get()
	defer c.Close()
	left, err := redis.Int(c.Do("GET", "stock"))
	if err != nil || left == 0 {
		return false, err
	}
	time.Sleep(time.Millisecond) // the time the real work takes
	_, err = c.Do("SET", "stock", left-1)
	return err == nil, err
}

const (
	stock    = 20
	replicas = 2
	buyers   = 4 // goroutines per replica
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "locker:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mr.Close()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", mr.Addr()) }}
	defer pool.Close()

	sold, err := sell(pool, func(int) (sync.Locker, error) { return &sync.Mutex{}, nil })
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "sync.Mutex per replica: sold %d of %d (oversold: %v)\n", sold, stock, sold > stock)

	var regs []*registry.Registry
	defer func() {
		for _, r := range regs {
			r.Close()
		}
	}()
	sold, err = sell(pool, func(int) (sync.Locker, error) {
		// Each replica has its own registry, as a separate process would.
		reg, err := registry.New(pool, "inventory")
		if err != nil {
			return nil, err
		}
		regs = append(regs, reg)
		return reg.Obtain("stock")
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "*registry.RedisLock:    sold %d of %d (oversold: %v)\n", sold, stock, sold > stock)
	return nil
}

// sell stocks the shelf, lets every buyer of every replica reserve until
// nothing is left, and returns how many reservations succeeded.
func sell(pool *redis.Pool, locker func(replica int) (sync.Locker, error)) (int, error) {
	c := pool.Get()
	_, err := c.Do("SET", "stock", stock)
	c.Close()
	if err != nil {
		return 0, err
	}
	var (
		mu   sync.Mutex
		sold int
		errs []error
		wg   sync.WaitGroup
	)
	for r := range replicas {
		l, err := locker(r)
		if err != nil {
			return 0, err
		}
		inv := &Inventory{mu: l, pool: pool}
		for range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ok, err := inv.Reserve()
					mu.Lock()
					if ok {
						sold++
					}
					if err != nil {
						errs = append(errs, err)
					}
					mu.Unlock()
					if !ok {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return sold, errs[0]
	}
	return sold, nil
}
