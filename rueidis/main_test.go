package rueidislock_test

import (
	"fmt"
	"os"
	"testing"
	"time"

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
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks is goleak.Find, tried for up to 10s: rueidis's cluster client
// closes the connections a topology refresh dropped 5s later, in a
// goroutine that Client.Close does not stop (clusterClient._refresh).
func findLeaks() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // poll interval of a deadline loop
	}
}
