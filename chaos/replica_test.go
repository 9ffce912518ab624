package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 13 (the replication link runs through a proxy, cut with a
// blackhole before the acquisition): the master dies before replicating a lock key and the
// replica is promoted (REPLICAOF NO ONE): a second client acquires the lock
// while the first still holds a valid hold. This reproduces the hole that
// asynchronous replication leaves (see docs/RELIABILITY.md); replica
// acknowledgement (WAIT) belongs to the scale-out work and is not built yet.
func TestReplicaPromoted(t *testing.T) {
	const ttl = 5 * time.Second
	master := startServer(t)
	link := newProxy(t, master.Addr) // the replication link, to cut
	host, port, _ := strings.Cut(link.Listen, ":")
	replica := startServer(t, "--replicaof", host, port)
	waitFor(t, 10*time.Second, "replication link up", func() bool {
		info, _ := redis.String(do(t, replica.Addr, "INFO", "replication"), nil)
		return strings.Contains(info, "master_link_status:up")
	})
	rA := newRegistry(t, newPool(master.Addr), "chaos13", registry.WithExpireAfter(ttl), registry.WithFencing())
	a, _ := rA.Obtain("k")

	addToxic(t, link, "cut", `"type":"timeout","stream":"downstream","attributes":{"timeout":0}`) // the replica falls behind
	mustNil(t, a.LockContext(ctxFor(t, time.Second)))
	master.Stop() // dies before replicating the key
	do(t, replica.Addr, "REPLICAOF", "NO", "ONE")

	rB := newRegistry(t, newPool(replica.Addr), "chaos13", registry.WithExpireAfter(ttl), registry.WithFencing())
	b, _ := rB.Obtain("k")
	got := lockAsync(ctxFor(t, 3*time.Second), b, 0)
	w := <-got
	select {
	case <-a.Lost():
		t.Fatal("the first holder's hold ended before the second acquired")
	default:
	}
	if w.err != nil {
		t.Fatalf("the promoted replica did not grant the lock (%v): the hole was not reproduced", w.err)
	}
	_ = a.UnlockContext(context.Background()) // the old master is gone
	figure(t, 13, "master killed before replicating the key, replica promoted: a second holder acquired while the first hold was still valid (double grant reproduced, 1 of 1); the fence counter was lost with the key, so fencing tokens restart")
}
