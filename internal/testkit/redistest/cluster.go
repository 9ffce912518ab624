package redistest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Cluster is a Redis Cluster of 3 masters and 3 replicas on loopback.
type Cluster struct {
	Nodes []*Server
	Addrs []string
}

var (
	clusterOnce sync.Once
	theCluster  *Cluster
	clusterErr  error
)

// SharedCluster starts a cluster on first use, shared by a test binary's
// tests; CloseSharedCluster (from TestMain) closes it.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = StartCluster() })
	if clusterErr != nil {
		t.Fatalf("cluster: %v", clusterErr) // never skipped: CI must run it
	}
	return theCluster
}

// StartCluster starts 6 nodes and makes them a cluster of 3 masters with a
// replica each.
func StartCluster() (*Cluster, error) {
	c := &Cluster{}
	for range 6 {
		bus, err := FreePort()
		if err != nil {
			c.Close()
			return nil, err
		}
		s, err := Start("--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.ready() {
		if time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("cluster not ready within 30s")
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a deadline loop
	}
	return c, nil
}

// ready reports whether every node sees a healthy cluster with 3 masters,
// each with a replica in sync.
func (c *Cluster) ready() bool {
	for _, a := range c.Addrs {
		info, err := redis.String(Do(a, "CLUSTER", "INFO"))
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
			return false
		}
		repl, err := redis.String(Do(a, "INFO", "replication"))
		if err != nil || (strings.Contains(repl, "role:master") && !strings.Contains(repl, "state=online")) {
			return false
		}
	}
	return true
}

// Close stops the nodes.
func (c *Cluster) Close() {
	for _, s := range c.Nodes {
		s.Close()
	}
}

// MasterOf returns the address of the master serving slot.
func (c *Cluster) MasterOf(tb testing.TB, slot int) string {
	tb.Helper()
	m, err := c.MasterAddr(slot)
	MustNil(tb, err)
	return m
}

// MasterAddr returns the address of the master serving slot.
func (c *Cluster) MasterAddr(slot int) (string, error) { return masterSeenBy(c.Addrs[0], slot) }

// masterSeenBy returns the address of the master serving slot in the view
// of the node at addr.
func masterSeenBy(addr string, slot int) (string, error) {
	slots, err := redis.Values(Do(addr, "CLUSTER", "SLOTS"))
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		r, _ := redis.Values(s, nil)
		lo, _ := redis.Int(r[0], nil)
		hi, _ := redis.Int(r[1], nil)
		if slot >= lo && slot <= hi {
			m, _ := redis.Values(r[2], nil)
			host, _ := redis.String(m[0], nil)
			port, _ := redis.Int(m[1], nil)
			return host + ":" + strconv.Itoa(port), nil
		}
	}
	return "", fmt.Errorf("no master serves slot %d", slot)
}

// DoKey runs one command on the master that serves key's slot, as a
// cluster client would route it.
func (c *Cluster) DoKey(key, cmd string, args ...any) (any, error) {
	slot, err := redis.Int(Do(c.Addrs[0], "CLUSTER", "KEYSLOT", key))
	if err != nil {
		return nil, err
	}
	m, err := c.MasterAddr(slot)
	if err != nil {
		return nil, err
	}
	return Do(m, cmd, args...)
}

// KeySlot returns the Cluster slot of key.
func (c *Cluster) KeySlot(tb testing.TB, key string) int {
	tb.Helper()
	n, err := redis.Int(Do(c.Addrs[0], "CLUSTER", "KEYSLOT", key))
	MustNil(tb, err)
	return n
}

// KeysPerMaster returns n keys whose hash tags ({key}) fall on each master.
func (c *Cluster) KeysPerMaster(tb testing.TB, n int) map[string][]string {
	tb.Helper()
	out := map[string][]string{}
	for i := 0; len(out) < 3 || !full(out, n); i++ {
		k := "k" + strconv.Itoa(i)
		m := c.MasterOf(tb, c.KeySlot(tb, k))
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

// Migrate moves slot from the master src to the master dst, keys
// included, as redis-cli --cluster reshard does, one key per MIGRATE;
// between runs after the slot is marked migrating and after each key.
func (c *Cluster) Migrate(tb testing.TB, slot int, src, dst string, between func()) {
	tb.Helper()
	do := func(addr, cmd string, args ...any) any {
		v, err := Do(addr, cmd, args...)
		if err != nil {
			tb.Fatalf("%s %s %v: %v", addr, cmd, args, err)
		}
		return v
	}
	srcID, _ := redis.String(do(src, "CLUSTER", "MYID"), nil)
	dstID, _ := redis.String(do(dst, "CLUSTER", "MYID"), nil)
	do(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	host, port, _ := strings.Cut(dst, ":")
	between()
	for {
		keys, _ := redis.Strings(do(src, "CLUSTER", "GETKEYSINSLOT", slot, 1), nil)
		if len(keys) == 0 {
			break
		}
		do(src, "MIGRATE", host, port, keys[0], 0, 5000)
		between()
	}
	do(dst, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	do(src, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	for _, a := range c.Addrs {
		if a != src && a != dst {
			_, _ = Do(a, "CLUSTER", "SETSLOT", slot, "NODE", dstID) // replicas refuse: fine
		}
	}
	// Every node, replicas included, sees dst serve the slot before the
	// next migration: one that starts on a stale view can leave the slot
	// to nobody.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var stale []string
		for _, a := range c.Addrs {
			if m, err := masterSeenBy(a, slot); err != nil || m != dst {
				stale = append(stale, fmt.Sprintf("%s sees %q (%v)", a, m, err))
			}
		}
		if len(stale) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("slot %d moved to %s, but after 10s: %v", slot, dst, stale)
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a deadline loop
	}
}

// CloseSharedCluster stops the shared cluster, if one was started.
func CloseSharedCluster() {
	if theCluster != nil {
		theCluster.Close()
	}
}
