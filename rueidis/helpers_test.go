package rueidislock_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

var prefixSeq atomic.Int64

// prefix returns a registry key unique to the test.
func prefix(t *testing.T) string {
	return fmt.Sprintf("rueidis-test.%d.%d", time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}

// newRegistry returns a registry on c, closed at the end of the test.
func newRegistry(t testing.TB, c rueidis.Client, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	return clienttest.NewRegistry(t, rueidislock.NewClient(c), prefix, opts...)
}

// singleOptions are the options the package doc recommends for one node.
func singleOptions(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true,
		Dialer: net.Dialer{Timeout: time.Second}}
}

// newClient returns a rueidis client for opt, closed at the end of tb.
func newClient(tb testing.TB, opt rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// newSingle returns a rueidis client of the single-node server.
func newSingle(tb testing.TB) rueidis.Client { return newClient(tb, singleOptions(single.Addr)) }

// mustNil, mustIs and ctxFor are the shared test helpers of redistest.
var (
	mustNil = redistest.MustNil
	mustIs  = redistest.MustIs
	ctxFor  = redistest.CtxFor
)

// waitFor is redistest.WaitFor: a deadline poll.
var waitFor = redistest.WaitFor
