package registry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// exampleRedis starts an embedded Redis; real code dials its own server.
func exampleRedis() (*redis.Pool, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", mr.Addr()) }}
	return pool, func() { pool.Close(); mr.Close() }
}

// A lock is a sync.Locker shared by every goroutine and replica.
func Example() {
	pool, done := exampleRedis()
	defer done()

	reg, err := registry.New(pool, "orders", registry.WithExpireAfter(30*time.Second))
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	lock, err := reg.Obtain("order-42")
	if err != nil {
		panic(err)
	}
	lock.Lock()
	fmt.Println("holding", lock.Key())
	lock.Unlock()
	// Output: holding orders:order-42
}

// New takes a redigo pool. Size it: MaxIdle at least the number of
// goroutines that lock or unlock at the same moment (each borrows a
// connection for one round trip), plus one with PubSubLock (its subscriber
// keeps one). A pool without MaxIdle keeps no idle connection, and dials a
// new one for every command.
func ExampleNew() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	addr := mr.Addr() // your server's host:port

	pool := &redis.Pool{
		MaxIdle:     64, // >= goroutines that lock at once
		IdleTimeout: 5 * time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(10*time.Second))
		},
	}
	defer pool.Close()

	reg, err := registry.New(pool, "orders")
	if err != nil {
		panic(err)
	}
	defer reg.Close()
	lock, _ := reg.Obtain("order-42")
	lock.Lock()
	fmt.Println("holding", lock.Key())
	lock.Unlock()
	// Output: holding orders:order-42
}

// ExecuteLocked runs a function under the lock and tells it when the lock
// is lost.
func ExampleRegistry_ExecuteLocked() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "jobs")
	defer reg.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := reg.ExecuteLocked(ctx, "nightly-report", func(ctx context.Context) error {
		// ctx is cancelled with cause registry.ErrLockLost if the lock is lost.
		fmt.Println("running the nightly report")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// running the nightly report
	// err: <nil>
}

// TryLock does not wait: the job runs on whichever replica gets there first.
func ExampleRedisLock_TryLock() {
	pool, done := exampleRedis()
	defer done()
	replicaA, _ := registry.New(pool, "jobs")
	defer replicaA.Close()
	replicaB, _ := registry.New(pool, "jobs")
	defer replicaB.Close()

	a, _ := replicaA.Obtain("cleanup")
	b, _ := replicaB.Obtain("cleanup")
	fmt.Println("replica A got it:", a.TryLock())
	fmt.Println("replica B got it:", b.TryLock())
	a.Unlock()
	// Output:
	// replica A got it: true
	// replica B got it: false
}

// LockContext waits at most until ctx ends.
func ExampleRedisLock_LockContext() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "stock", registry.WithIdleBetweenTries(10*time.Millisecond))
	defer reg.Close()
	lock, _ := reg.Obtain("sku-1")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := lock.LockContext(ctx); err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Unlock()
	fmt.Println("acquired")
	// Output: acquired
}

// With WithFencing every acquisition gets a token that grows across all
// holders; pass it to the storage you protect.
func ExampleRedisLock_Token() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "records", registry.WithFencing())
	defer reg.Close()
	lock, _ := reg.Obtain("record-7")
	var last int64
	for range 2 {
		lock.Lock()
		fmt.Println("token above the last:", lock.Token() > last)
		last = lock.Token()
		lock.Unlock()
	}
	// Output:
	// token above the last: true
	// token above the last: true
}

// NewWithClient takes any Client: here the redigo one that New builds,
// wrapped to count the scripts the registry runs (before its first
// attempt a registry publishes its label, once: see WithLabel).
func ExampleNewWithClient() {
	pool, done := exampleRedis()
	defer done()
	counter := &countingClient{Client: registry.NewPoolClient(pool)}
	reg, _ := registry.NewWithClient(counter, "orders")
	defer reg.Close()
	lock, _ := reg.Obtain("order-42")
	lock.Lock()
	fmt.Println("holding", lock.Key())
	lock.Unlock()
	fmt.Println(counter.scripts)
	// Output:
	// holding orders:order-42
	// [label obtain drop]
}

type countingClient struct {
	registry.Client
	scripts []string
}

func (c *countingClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	c.scripts = append(c.scripts, s.Name())
	return c.Client.Eval(ctx, s, keys, args)
}

// Stats counts what a registry did; export it to your metrics system.
func ExampleRegistry_Stats() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "orders")
	defer reg.Close()
	lock, _ := reg.Obtain("order-42")
	for range 3 {
		lock.Lock()
		//lint:ignore SA2001 an empty critical section is enough to count
		lock.Unlock()
	}
	s := reg.Stats()
	fmt.Println("acquisitions:", s.Acquisitions, "contended:", s.Contended, "lost:", s.LostLocks, "cached:", s.CachedLocks)
	// Output: acquisitions: 3 contended: 0 lost: 0 cached: 1
}

// LockFor takes one lock for its own TTL (Spring's lock(ttl)); with a
// deadline it is Spring's tryLock(waitTime, ttl).
func ExampleRedisLock_LockFor() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "payments") // expireAfter 60s
	defer reg.Close()
	lock, _ := reg.Obtain("payment-9")

	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // waitTime
	defer cancel()
	if err := lock.LockFor(ctx, 2*time.Second); err != nil { // ttl
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Unlock()
	fmt.Println("holding", lock.Key(), "for 2s")
	// Output: holding payments:payment-9 for 2s
}

// TryLockContext tells "another holder has it" from a failure: a job can
// skip its run in the first case and alert in the second.
func ExampleRedisLock_TryLockContext() {
	pool, done := exampleRedis()
	defer done()
	reg, _ := registry.New(pool, "jobs")
	defer reg.Close()
	lock, _ := reg.Obtain("nightly")

	held, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() { // another worker holds the job's lock
		defer close(finished)
		lock.Lock()
		close(held)
		<-release
		lock.Unlock()
	}()
	<-held
	switch err := lock.TryLockContext(context.Background()); {
	case errors.Is(err, registry.ErrNotObtained):
		fmt.Println("skipped: another worker runs it")
	case err != nil:
		fmt.Println("alert:", err)
	default:
		lock.Unlock()
	}
	close(release)
	<-finished
	// Output: skipped: another worker runs it
}

// A semaphore admits at most N holders at once across every replica; each
// permit is a Lease.
func ExampleRegistry_Semaphore() {
	pool, done := exampleRedis()
	defer done()

	reg, err := registry.New(pool, "exports", registry.WithFencing())
	if err != nil {
		panic(err)
	}
	defer reg.Close()

	sem, err := reg.Semaphore("partner-api", 2)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _ := sem.Acquire(ctx, 10*time.Second)
	second, _ := sem.TryAcquire(ctx, 0)
	_, err = sem.TryAcquire(ctx, 0)
	fmt.Println("third permit:", errors.Is(err, registry.ErrNotObtained))
	fmt.Println("tokens increase:", second.Token() > first.Token())
	_ = first.Release(ctx)
	_ = second.Release(ctx)
	// Output:
	// third permit: true
	// tokens increase: true
}

// Inspect shows who holds a key and who waits, from any process.
func ExampleRegistry_Inspect() {
	pool, done := exampleRedis()
	defer done()
	worker, _ := registry.New(pool, "jobs", registry.WithLabel("worker-1"))
	defer worker.Close()
	lease, _ := worker.Acquire(context.Background(), "nightly-report", 30*time.Second)
	defer lease.Release(context.Background())

	ops, _ := registry.New(pool, "jobs")
	defer ops.Close()
	info, err := ops.Inspect(context.Background(), "nightly-report")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Kind, len(info.Holders), info.Holders[0].Label, info.Holders[0].TTL > 29*time.Second)
	// Output: lock 1 worker-1 true
}
