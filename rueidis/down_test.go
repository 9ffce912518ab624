package rueidislock_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

// With the rueidis options the package doc recommends (ForceSingleClient:
// NewClient returns a client, and the dial error, while the server is
// down), a registry on a server that is down fails as it does on redigo:
// LockContext's error carries the connection error, every failed attempt
// counts in Stats.RedisErrors, and TryLock returns at once.
func TestServerDownRecommendedOptions(t *testing.T) {
	port, err := redistest.FreePort()
	mustNil(t, err)
	c, err := rueidis.NewClient(singleOptions("127.0.0.1:" + strconv.Itoa(port)))
	if c == nil {
		t.Fatalf("NewClient with ForceSingleClient returned no client: %v", err)
	}
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("NewClient error %v, want the dial's", err)
	}
	t.Cleanup(c.Close)
	clienttest.ServerDown(t, rueidislock.NewClient(c))
}

// A server that comes back is used again: the client of a server that was
// down at NewClient (ForceSingleClient) and restarted takes locks.
func TestServerBack(t *testing.T) {
	s, err := redistest.Start()
	mustNil(t, err)
	t.Cleanup(s.Close)
	s.Stop()
	c, _ := rueidis.NewClient(singleOptions(s.Addr))
	if c == nil {
		t.Fatal("NewClient with ForceSingleClient returned no client")
	}
	t.Cleanup(c.Close)
	r := newRegistry(t, c, prefix(t), registry.WithLockType(registry.PubSubLock))
	l, err := r.Obtain("k")
	mustNil(t, err)
	if l.TryLock() {
		t.Fatal("TryLock succeeded with the server down")
	}
	mustNil(t, s.Restart())
	mustNil(t, l.LockContext(ctxFor(t, 5*time.Second)))
	mustNil(t, l.UnlockContext(ctxFor(t, 5*time.Second)))
}
