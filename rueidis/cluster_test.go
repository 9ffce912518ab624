package rueidislock_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/redistest"
)

// cluster is a Redis Cluster of 3 masters and 3 replicas on loopback.
type cluster struct {
	nodes []*redistest.Server
	addrs []string
}

var (
	clusterOnce sync.Once
	theCluster  *cluster
	clusterErr  error
)

// sharedCluster starts the cluster on first use; TestMain closes it.
func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = startCluster() })
	if clusterErr != nil {
		t.Fatalf("cluster: %v", clusterErr) // never skipped: CI must run it
	}
	return theCluster
}

func startCluster() (*cluster, error) {
	c := &cluster{}
	for range 6 {
		bus, err := redistest.FreePort()
		if err != nil {
			c.close()
			return nil, err
		}
		s, err := redistest.Start("--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
		if err != nil {
			c.close()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
		c.addrs = append(c.addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.ready() {
		if time.Now().After(deadline) {
			c.close()
			return nil, fmt.Errorf("cluster not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a deadline loop
	}
	return c, nil
}

// ready reports whether every node sees a healthy cluster with 3 masters,
// each with a replica in sync.
func (c *cluster) ready() bool {
	for _, a := range c.addrs {
		info, err := redigo.String(redistest.Do(a, "CLUSTER", "INFO"))
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
			return false
		}
		repl, err := redigo.String(redistest.Do(a, "INFO", "replication"))
		if err != nil || (strings.Contains(repl, "role:master") && !strings.Contains(repl, "state=online")) {
			return false
		}
	}
	return true
}

func (c *cluster) close() {
	for _, s := range c.nodes {
		s.Close()
	}
}

// client returns a rueidis cluster client closed at the end of tb.
func (c *cluster) client(tb testing.TB) rueidis.Client {
	rc := newClient(tb, clusterOptions(c.addrs))
	if rc.Mode() != rueidis.ClientModeCluster {
		tb.Fatalf("rueidis client in mode %s, want cluster", rc.Mode())
	}
	return rc
}

// clusterOptions are the options the package doc recommends for Cluster.
func clusterOptions(addrs []string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: addrs, DisableCache: true}
}

// masterOf returns the address of the master serving slot.
func (c *cluster) masterOf(tb testing.TB, slot int) string {
	tb.Helper()
	slots, err := redigo.Values(redistest.Do(c.addrs[0], "CLUSTER", "SLOTS"))
	mustNil(tb, err)
	for _, s := range slots {
		r, _ := redigo.Values(s, nil)
		lo, _ := redigo.Int(r[0], nil)
		hi, _ := redigo.Int(r[1], nil)
		if slot >= lo && slot <= hi {
			m, _ := redigo.Values(r[2], nil)
			host, _ := redigo.String(m[0], nil)
			port, _ := redigo.Int(m[1], nil)
			return host + ":" + strconv.Itoa(port)
		}
	}
	tb.Fatalf("no master serves slot %d", slot)
	return ""
}

// keySlot returns the Cluster slot of key.
func (c *cluster) keySlot(tb testing.TB, key string) int {
	tb.Helper()
	n, err := redigo.Int(redistest.Do(c.addrs[0], "CLUSTER", "KEYSLOT", key))
	mustNil(tb, err)
	return n
}

// keysPerMaster returns n keys whose hash tags ({key}) fall on each master.
func (c *cluster) keysPerMaster(tb testing.TB, n int) map[string][]string {
	tb.Helper()
	out := map[string][]string{}
	for i := 0; len(out) < 3 || !full(out, n); i++ {
		k := "k" + strconv.Itoa(i)
		m := c.masterOf(tb, c.keySlot(tb, k))
		if len(out[m]) < n {
			out[m] = append(out[m], k)
		}
	}
	return out
}

func full(m map[string][]string, n int) bool {
	for _, v := range m {
		if len(v) < n {
			return false
		}
	}
	return true
}

// migrate moves slot from the master src to the master dst, keys
// included, as redis-cli --cluster reshard does, one key per MIGRATE;
// between runs after the slot is marked migrating and after each key.
func (c *cluster) migrate(tb testing.TB, slot int, src, dst string, between func()) {
	tb.Helper()
	do := func(addr, cmd string, args ...any) any {
		v, err := redistest.Do(addr, cmd, args...)
		if err != nil {
			tb.Fatalf("%s %s %v: %v", addr, cmd, args, err)
		}
		return v
	}
	srcID, _ := redigo.String(do(src, "CLUSTER", "MYID"), nil)
	dstID, _ := redigo.String(do(dst, "CLUSTER", "MYID"), nil)
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	host, port, _ := strings.Cut(dst, ":")
	between()
	for {
		keys, _ := redigo.Strings(do(src, "CLUSTER", "GETKEYSINSLOT", slot, 1), nil)
		if len(keys) == 0 {
			break
		}
		do(src, "MIGRATE", host, port, keys[0], 0, 5000)
		between()
	}
	do(dst, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	do(src, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	for _, a := range c.addrs {
		if a != src && a != dst {
			_, _ = redistest.Do(a, "CLUSTER", "SETSLOT", slot, "NODE", dstID) // replicas refuse: fine
		}
	}
}

func ctxBg() context.Context { return context.Background() }
