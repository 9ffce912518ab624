package goredis_test

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/internal/redistest"
)

var prefixSeq atomic.Int64

// prefix returns a registry key unique to the test.
func prefix(t *testing.T) string {
	return fmt.Sprintf("goredis-test.%d.%d", time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}

// quiet is the registries' logger: errors only.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newSingle returns a go-redis client of the single-node server.
func newSingle(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// mustNil and mustIs are the shared test helpers of redistest.
var (
	mustNil = redistest.MustNil
	mustIs  = redistest.MustIs
)
