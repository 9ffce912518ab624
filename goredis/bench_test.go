package goredis_test

import (
	"testing"

	"github.com/lockyard/lockyard/goredis"
	"github.com/lockyard/lockyard/internal/testkit/clienttest"
)

// BenchLockUnlock (internal/testkit/clienttest) on go-redis.

// One node through go-redis.
func BenchmarkSingleLockUnlock(b *testing.B) {
	clienttest.BenchLockUnlock(b, goredis.NewClient(newSingle(b)), single.Addr)
}

// Three shards through go-redis's cluster client; the keys spread over
// the slots. srv-us/op sums the six nodes (replicas apply the writes too).
func BenchmarkClusterLockUnlock(b *testing.B) {
	c := sharedCluster(b)
	clienttest.BenchLockUnlock(b, goredis.NewClient(c.client(b)), c.Addrs...)
}
