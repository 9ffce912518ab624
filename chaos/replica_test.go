package chaos

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/registry"
)

// Scenario 13 (the replication link runs through a proxy, cut with a
// blackhole before the acquisition): the master dies before replicating a
// lock key and the replica is promoted (REPLICAOF NO ONE).
//
// Without WithReplicaAck a second client acquires the lock while the first
// still holds a valid hold: the hole that asynchronous replication leaves
// (see docs/RELIABILITY.md). With WithReplicaAck(1, 100ms) the first
// client's obtain is not acknowledged by the replica, so it is undone and
// reported as ErrReplicaAck: nobody held the lock when the master died, and
// there is no double grant.
func TestReplicaPromoted(t *testing.T) {
	t.Run("without-ack", func(t *testing.T) {
		heldByA, double, tokA, tokB := promote(t)
		if !heldByA || !double {
			t.Fatalf("first holder acquired: %v, double grant: %v; want both (the hole was not reproduced)", heldByA, double)
		}
		figure(t, 13, "without WithReplicaAck: master killed before replicating the key, replica promoted: a second holder acquired while the first hold was still valid (double grant, 1 of 1); fencing tokens %d (first holder) and %d (second): %s",
			tokA, tokB, fenceOutcome(tokA, tokB))
	})
	t.Run("with-ack", func(t *testing.T) {
		heldByA, double, _, _ := promote(t, registry.WithReplicaAck(1, 100*time.Millisecond))
		if heldByA || double {
			t.Fatalf("first holder acquired: %v, double grant: %v; want neither", heldByA, double)
		}
		figure(t, 13, "with WithReplicaAck(1, 100ms): the unreplicated obtain was refused (ErrReplicaAck) and undone; after the promotion the second holder was the only one (0 double grants)")
	})
}

// fenceOutcome says what the fencing tokens of the two holders of a double
// grant leave a store that accepts only tokens above the highest it saw.
func fenceOutcome(a, b int64) string {
	switch {
	case b == a:
		return "the replica's counter lagged with the key, so the token was handed out twice: the store takes only the first of the two writes"
	case b > a:
		return "the replica lacked the counter and seeded it from its clock, so the second token is above the first: the first holder's later writes are rejected"
	}
	return "the second token is below the first: the store rejects the second holder's writes once it saw the first's"
}

// promote runs scenario 13 with the first client's extra options and
// reports whether the first client acquired the lock while the replica was
// cut off, whether the second client then acquired it too while the first
// hold was still valid, and the fencing tokens of both holds.
func promote(t *testing.T, optsA ...registry.Option) (heldByA, double bool, tokA, tokB int64) {
	const ttl = 5 * time.Second
	master := startServer(t, "--repl-diskless-sync-delay", "0")
	link := newProxy(t, master.Addr) // the replication link, to cut
	host, port, _ := strings.Cut(link.Listen, ":")
	replica := startServer(t, "--replicaof", host, port)
	waitFor(t, 10*time.Second, "replication link up", func() bool {
		info, _ := redis.String(do(t, replica.Addr, "INFO", "replication"), nil)
		return strings.Contains(info, "master_link_status:up")
	})
	rA := newRegistry(t, newPool(master.Addr), "chaos13", append(optsA, registry.WithExpireAfter(ttl), registry.WithFencing())...)
	a, _ := rA.Obtain("k")
	// The link works: so does the first client, acknowledged or not.
	mustNil(t, a.LockContext(ctxFor(t, 2*time.Second)))
	mustNil(t, a.UnlockContext(ctxFor(t, time.Second)))
	// The release must reach the replica before the cut: a lost release
	// would bring the lock back on the promoted replica until its TTL.
	waitFor(t, 5*time.Second, "the release replicated", func() bool {
		n, _ := redis.Int(do(t, replica.Addr, "EXISTS", a.Key()), nil)
		return n == 0
	})

	addToxic(t, link, "cut", `"type":"timeout","stream":"downstream","attributes":{"timeout":0}`) // the replica falls behind
	err := a.LockContext(ctxFor(t, time.Second))
	switch {
	case err == nil:
		heldByA, tokA = true, a.Token()
	case errors.Is(err, registry.ErrReplicaAck):
		// Undone at once, or, when the deadline cut the reply short, by
		// the registry's background cleanup.
		waitFor(t, 2*time.Second, "the unacknowledged obtain to be undone", func() bool {
			n, _ := redis.Int(do(t, master.Addr, "EXISTS", a.Key()), nil)
			return n == 0
		})
	default:
		t.Fatalf("LockContext with the replica cut off: %v", err)
	}
	master.Stop() // dies before replicating the key
	do(t, replica.Addr, "REPLICAOF", "NO", "ONE")

	rB := newRegistry(t, newPool(replica.Addr), "chaos13", registry.WithExpireAfter(ttl), registry.WithFencing())
	b, _ := rB.Obtain("k")
	w := <-lockAsync(ctxFor(t, 3*time.Second), b, 0)
	if w.err != nil {
		t.Fatalf("the promoted replica did not grant the lock: %v", w.err)
	}
	tokB, _ = redis.Int64(do(t, replica.Addr, "GET", "{"+b.Key()+"}:fence"), nil) // b's token: its release left the counter
	if heldByA {
		select {
		case <-a.Lost():
			t.Fatal("the first holder's hold ended before the second acquired")
		default:
			double = true
		}
		_ = a.UnlockContext(context.Background()) // the old master is gone
	}
	return heldByA, double, tokA, tokB
}
