package goredis_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/internal/redistest"
)

// single is the redis-server of the single-node tests.
var single *redistest.Server

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	var err error
	single, err = redistest.Start()
	if err != nil {
		// Never skip the real tier: a missing server is a failure.
		fmt.Fprintln(os.Stderr, "FAIL: real-Redis tier:", err)
		os.Exit(1)
	}
	code := m.Run()
	single.Close()
	if theCluster != nil {
		theCluster.close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
