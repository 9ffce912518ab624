package rueidislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

// In Cluster, EvalWait runs the script and WAIT on the master of the
// key's slot, whose replica acknowledges. After the slot moved, it returns
// the MOVED reply (rueidis's cluster DoMulti would send the script alone
// to the new master and take WAIT's count from the old one), then succeeds
// on the new master once rueidis has refreshed its slots.
func TestClusterEvalWait(t *testing.T) {
	c := sharedCluster(t)
	rc := c.client(t)
	s := scripts(t, rc)
	cl := rueidislock.NewClient(rc)
	pfx := prefix(t)
	ctx := ctxFor(t, 30*time.Second)
	for m, ks := range c.KeysPerMaster(t, 1) {
		k := "{" + ks[0] + "}:" + pfx
		v, acked, err := cl.EvalWait(ctx, s["obtain"], lockKeys(k), obtainArgs("tok"), 1, 2*time.Second)
		mustNil(t, err)
		if x, ok := v.([]any); !ok || x[0] != int64(1) || acked != 1 {
			t.Fatalf("EvalWait on %s = %#v, %d; want a grant acknowledged by its replica", m, v, acked)
		}
	}

	slot := c.KeySlot(t, "mv")
	src := c.MasterOf(t, slot)
	var dst string
	for _, ks := range c.KeysPerMaster(t, 1) {
		if m := c.MasterOf(t, c.KeySlot(t, ks[0])); m != src {
			dst = m
			break
		}
	}
	c.Migrate(t, slot, src, dst, func() {})
	k := "{mv}:" + pfx
	keys := lockKeys(k)
	_, acked, err := cl.EvalWait(ctx, s["obtain"], keys, obtainArgs("tok"), 1, time.Second)
	var re *registry.ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "MOVED") || acked != 0 {
		t.Fatalf("EvalWait after the slot moved = %d, %v; want 0 and the MOVED reply", acked, err)
	}
	if n, _ := redigo.Int(redistest.Do(dst, "EXISTS", k)); n != 0 {
		t.Fatal("the script ran on the new master, without WAIT")
	}
	waitFor(t, 10*time.Second, "EvalWait on the new master", func() bool {
		_, acked, err = cl.EvalWait(ctx, s["obtain"], keys, obtainArgs("tok"), 1, time.Second)
		return err == nil
	})
	if acked != 1 {
		t.Fatalf("EvalWait on the new master acknowledged by %d replicas, want 1", acked)
	}
	if n, _ := redigo.Int(redistest.Do(dst, "EXISTS", k)); n != 1 {
		t.Fatal("the key is not on the new master")
	}
}

// WithReplicaAck in Cluster: locks on every master are granted, each
// acknowledged by the master's replica.
func TestClusterReplicaAck(t *testing.T) {
	c := sharedCluster(t)
	r := newRegistry(t, c.client(t), prefix(t), registry.WithHashTag(), registry.WithReplicaAck(1, time.Second))
	for m, ks := range c.KeysPerMaster(t, 2) {
		for _, k := range ks {
			l, err := r.Obtain(k)
			mustNil(t, err)
			if err := l.LockContext(ctxFor(t, 5*time.Second)); err != nil {
				t.Fatalf("lock %s on %s: %v", k, m, err)
			}
			mustNil(t, l.UnlockContext(ctxFor(t, 5*time.Second)))
		}
	}
}
