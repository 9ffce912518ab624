package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockyard/lockyard/registry"
)

func main() {
	addr := flag.String("redis", os.Getenv("REDIS_ADDR"), "Redis address (default $REDIS_ADDR, else an embedded Redis)")
	listen := flag.String("listen", "127.0.0.1:9187", "address of /metrics")
	flag.Parse()
	pool, done, err := redisPool(*addr)
	if err != nil {
		log.Fatal(err)
	}
	defer done()
	reg, err := registry.New(pool.Pool, "orders")
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	prom := prometheus.NewRegistry()
	prom.MustRegister(NewCollector(reg, "orders"))

	// Some work to measure: one lock taken every 100ms.
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := reg.ExecuteLocked(ctx, "order-42", func(context.Context) error { return nil })
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	http.Handle("/metrics", promhttp.HandlerFor(prom, promhttp.HandlerOpts{}))
	log.Printf("Redis at %s", pool.addr)
	log.Printf("metrics on http://%s/metrics", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

// pool is a redigo pool and the address it dials.
type pool struct {
	*redis.Pool
	addr string
}

// redisPool returns a pool for the Redis at addr, or, if addr is empty, for
// an embedded Redis (miniredis) on a loopback port, as the other examples
// do; done closes both.
func redisPool(addr string) (pool, func(), error) {
	stop := func() {}
	if addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return pool{}, nil, err
		}
		addr, stop = mr.Addr(), mr.Close
	}
	p := &redis.Pool{
		MaxIdle:     16,
		IdleTimeout: time.Minute,
		Dial:        func() (redis.Conn, error) { return redis.Dial("tcp", addr) },
	}
	return pool{p, addr}, func() { p.Close(); stop() }, nil
}
