package goredis_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/internal/redistest"
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

func ctxBg() context.Context { return context.Background() }
