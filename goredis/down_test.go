package goredis_test

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// With the go-redis options the package doc recommends (MaxRetries -1,
// ContextTimeoutEnabled), a registry on a server that is down fails as it
// does on redigo: LockContext's error carries the connection error, every
// failed attempt counts in Stats.RedisErrors, and TryLock returns within
// go-redis's own dial retries rather than its command retries.
func TestServerDownRecommendedOptions(t *testing.T) {
	port, err := redistest.FreePort()
	mustNil(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	clienttest.ServerDown(t, goredis.NewClient(rdb))
}
