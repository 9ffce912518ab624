package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// newSingle returns a go-redis client of the single-node server.
func newSingle(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: single.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// mustNil is the shared test helper of redistest.
var mustNil = redistest.MustNil
