package core

import (
	"testing"

	"go.uber.org/goleak"
)

// Every background goroutine of the core (the watchdog's loop, spawned
// work) stops when its group closes.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
