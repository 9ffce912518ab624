package rueidislock_test

import (
	"testing"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

// BenchLockUnlock (internal/testkit/clienttest) on rueidis.

// One node through rueidis.
func BenchmarkSingleLockUnlock(b *testing.B) {
	clienttest.BenchLockUnlock(b, rueidislock.NewClient(newSingle(b)), single.Addr)
}

// Three shards through rueidis's cluster client; the keys spread over
// the slots. srv-us/op sums the six nodes (replicas apply the writes too).
func BenchmarkClusterLockUnlock(b *testing.B) {
	c := sharedCluster(b)
	clienttest.BenchLockUnlock(b, rueidislock.NewClient(c.client(b)), c.Addrs...)
}
