package goredis_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/internal/testkit/clienttest"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// single is the redis-server of the single-node tests.
var single *redistest.Server

func TestMain(m *testing.M) {
	if role := os.Getenv(clienttest.ChildEnv); role != "" {
		os.Exit(clienttest.RunChild(role, adapter))
	}
	redis.SetLogger(discard{}) // go-redis logs every redial of a failover
	var err error
	single, err = redistest.Start()
	if err != nil {
		// Never skip the real tier: a missing server is a failure.
		fmt.Fprintln(os.Stderr, "FAIL: real-Redis tier:", err)
		os.Exit(1)
	}
	code := m.Run()
	single.Close()
	redistest.CloseSharedCluster()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}
