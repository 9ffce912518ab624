package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestMain runs the test binary as a replica when the demo runs it again
// as one.
func TestMain(m *testing.M) {
	if js := os.Getenv(replicaEnv); js != "" {
		os.Exit(replicaMain(js))
	}
	os.Exit(m.Run())
}

// With AcquireAll the books balance and no account is in two transfers at
// once, every transfer completes, and transfers on disjoint accounts run
// side by side; the replicas are processes of their own; without a lock
// the books do not balance.
func TestTransferDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	c := config{replicas: 4, workers: 2, accounts: 6, transfers: 25, check: time.Millisecond}
	var out bytes.Buffer
	if err := run(&out, mr.Addr(), c); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	locked, err := round(mr.Addr(), true, c)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(c.replicas * c.workers * c.transfers); locked.transfers != want || locked.before != locked.after || locked.sharedAccounts != 0 || locked.insideAtOnce < 2 {
		t.Fatalf("with AcquireAll: %d of %d transfers, money %d -> %d, %d transfers sharing an account, at most %d at once",
			locked.transfers, want, locked.before, locked.after, locked.sharedAccounts, locked.insideAtOnce)
	}
	free, err := round(mr.Addr(), false, c)
	if err != nil {
		t.Fatal(err)
	}
	if free.before == free.after {
		t.Fatalf("without a lock the books balanced after %d transfers: the demo shows nothing", free.transfers)
	}
}
