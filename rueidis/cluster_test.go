package rueidislock_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
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

// adapter builds rueidis clients for the shared scenarios, with the
// options the package doc recommends.
var adapter = clienttest.Adapter{
	Name: "rueidis",
	Single: func(addr string) (registry.Client, func(), error) {
		return rueidisClient(singleOptions(addr), rueidis.ClientModeStandalone)
	},
	Cluster: func(addrs []string) (registry.Client, func(), error) {
		return rueidisClient(clusterOptions(addrs), rueidis.ClientModeCluster)
	},
	Sentinel: func(addrs []string) (registry.Client, func(), error) {
		return rueidisClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true,
			Dialer:   net.Dialer{Timeout: 500 * time.Millisecond},
			Sentinel: rueidis.SentinelOption{MasterSet: redistest.SentinelMaster, Dialer: net.Dialer{Timeout: 500 * time.Millisecond}},
		}, rueidis.ClientModeSentinel)
	},
}

// rueidisClient returns the adapter on a rueidis client of opt, which must
// come up in mode.
func rueidisClient(opt rueidis.ClientOption, mode rueidis.ClientMode) (registry.Client, func(), error) {
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, err
	}
	if rc.Mode() != mode {
		rc.Close()
		return nil, nil, fmt.Errorf("rueidis client in mode %s, want %s", rc.Mode(), mode)
	}
	return rueidislock.NewClient(rc), rc.Close, nil
}
