package registry_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// real is the redis-server shared by the real tier. Each test uses its own
// key prefix on it.
var real *redistest.Server

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	var err error
	real, err = redistest.Start()
	if err != nil {
		// Never skip the real tier: a missing server is a failure.
		fmt.Fprintln(os.Stderr, "FAIL: real-Redis tier:", err)
		os.Exit(1)
	}
	code := m.Run()
	real.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
