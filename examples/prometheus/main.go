package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockyard/lockyard/registry"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:9187", "address of /metrics")
	flag.Parse()
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", *addr) }}
	defer pool.Close()
	reg, err := registry.New(pool, "orders")
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
	log.Printf("metrics on http://%s/metrics", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}
