package goredis_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// cluster is the shared redistest.Cluster, with this module's client.
type cluster struct{ *redistest.Cluster }

// sharedCluster starts the cluster on first use; TestMain closes it.
func sharedCluster(t testing.TB) *cluster { return &cluster{redistest.SharedCluster(t)} }

// client returns a go-redis cluster client closed at the end of tb.
func (c *cluster) client(tb testing.TB) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}

// adapter builds go-redis clients for the shared scenarios.
var adapter = clienttest.Adapter{
	Name: "goredis",
	Single: func(addr string) (registry.Client, func(), error) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		return goredis.NewClient(rdb), func() { rdb.Close() }, nil
	},
	Cluster: func(addrs []string) (registry.Client, func(), error) {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		return goredis.NewClient(rdb), func() { rdb.Close() }, nil
	},
	Sentinel: func(addrs []string) (registry.Client, func(), error) {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: addrs,
			ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond})
		return goredis.NewClient(rdb), func() { rdb.Close() }, nil
	},
}
