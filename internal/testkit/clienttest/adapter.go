// Package clienttest holds the tests that every registry.Client adapter
// (goredis/, rueidis/) runs against Redis Cluster and Sentinel: each
// adapter module's tests call them with an Adapter that builds its
// clients, so that the scenarios are written once.
package clienttest

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// Adapter builds registry.Clients on one client library. Each function
// returns the client and a function that closes it.
type Adapter struct {
	// Name is the library's, for registry keys and logs.
	Name string
	// Single returns a client of the single node at addr.
	Single func(addr string) (registry.Client, func(), error)
	// Cluster returns a client of the Redis Cluster whose nodes are at
	// addrs.
	Cluster func(addrs []string) (registry.Client, func(), error)
	// Sentinel returns a client of the master that the sentinels at addrs
	// watch under redistest.SentinelMaster.
	Sentinel func(addrs []string) (registry.Client, func(), error)
}

// single returns a.Single's client, closed at the end of tb.
func (a Adapter) single(tb testing.TB, addr string) registry.Client {
	tb.Helper()
	c, closeFn, err := a.Single(addr)
	if err != nil {
		tb.Fatalf("%s client: %v", a.Name, err)
	}
	tb.Cleanup(closeFn)
	return c
}

// cluster returns a.Cluster's client, closed at the end of tb.
func (a Adapter) cluster(tb testing.TB, addrs []string) registry.Client {
	tb.Helper()
	c, closeFn, err := a.Cluster(addrs)
	if err != nil {
		tb.Fatalf("%s cluster client: %v", a.Name, err)
	}
	tb.Cleanup(closeFn)
	return c
}

// sentinel returns a.Sentinel's client, closed at the end of tb.
func (a Adapter) sentinel(tb testing.TB, addrs []string) registry.Client {
	tb.Helper()
	c, closeFn, err := a.Sentinel(addrs)
	if err != nil {
		tb.Fatalf("%s sentinel client: %v", a.Name, err)
	}
	tb.Cleanup(closeFn)
	return c
}

var prefixSeq atomic.Int64

// prefix returns a registry key unique to the test.
func prefix(t *testing.T) string {
	return fmt.Sprintf("clienttest.%d.%d", time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}

// Quiet is the registries' logger in these tests: nothing.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// NewRegistry returns a registry on c that logs nothing, closed at the end
// of the test.
func NewRegistry(t testing.TB, c registry.Client, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithLogger(Quiet)}, opts...)
	r, err := registry.NewWithClient(c, prefix, opts...)
	if err != nil {
		t.Fatalf("NewWithClient: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
