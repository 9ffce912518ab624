package rueidislock_test

import (
	"testing"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
)

// The single-node scenarios every adapter runs (internal/testkit/clienttest), on
// rueidis.

func TestSingleNode(t *testing.T) { clienttest.SingleNode(t, adapter, single.Addr) }
func TestRenewalAndScriptFlush(t *testing.T) {
	clienttest.RenewalAndScriptFlush(t, adapter, single.Addr)
}
func TestReplicaAckWithoutReplica(t *testing.T) {
	clienttest.ReplicaAckWithoutReplica(t, adapter, single.Addr)
}
func TestContention(t *testing.T)      { clienttest.Contention(t, adapter, single.Addr) }
func TestSubscribesByKey(t *testing.T) { clienttest.SubscribesByKey(t, adapter, single.Addr) }
func TestClientSetNX(t *testing.T)     { clienttest.SetNX(t, adapter, single.Addr) }
func TestClientNative(t *testing.T)    { clienttest.Native(t, adapter, single.Addr) }
