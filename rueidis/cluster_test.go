package rueidislock_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/redistest"
)

// cluster is the shared redistest.Cluster, with this module's client.
type cluster struct{ *redistest.Cluster }

// sharedCluster starts the cluster on first use; TestMain closes it.
func sharedCluster(t testing.TB) *cluster { return &cluster{redistest.SharedCluster(t)} }

// client returns a rueidis cluster client closed at the end of tb.
func (c *cluster) client(tb testing.TB) rueidis.Client {
	rc := newClient(tb, clusterOptions(c.Addrs))
	if rc.Mode() != rueidis.ClientModeCluster {
		tb.Fatalf("rueidis client in mode %s, want cluster", rc.Mode())
	}
	return rc
}

// clusterOptions are the options the package doc recommends for Cluster.
func clusterOptions(addrs []string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: addrs, DisableCache: true}
}

func ctxBg() context.Context { return context.Background() }
