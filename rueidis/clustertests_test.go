package rueidislock_test

import (
	"testing"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
)

// The scenarios every adapter runs (internal/testkit/clienttest), on rueidis.

func TestClusterMutualExclusion(t *testing.T)     { clienttest.ClusterMutualExclusion(t, adapter) }
func TestClusterWakeups(t *testing.T)             { clienttest.ClusterWakeups(t, adapter) }
func TestClusterHashTagFencing(t *testing.T)      { clienttest.ClusterHashTagFencing(t, adapter) }
func TestClusterSlotMigration(t *testing.T)       { clienttest.ClusterSlotMigration(t, adapter) }
func TestClusterReleaseMidMigration(t *testing.T) { clienttest.ClusterReleaseMidMigration(t, adapter) }
func TestClusterSemaphore(t *testing.T)           { clienttest.ClusterSemaphore(t, adapter) }
func TestClusterInspect(t *testing.T)             { clienttest.ClusterInspect(t, adapter) }
func TestClusterMultiKey(t *testing.T)            { clienttest.ClusterMultiKey(t, adapter) }
func TestSentinelFailover(t *testing.T)           { clienttest.SentinelFailover(t, adapter) }
