package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" { // this test binary re-executed as a worker
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// With the lock the stock comes out exact; the unlocked round is printed.
func TestOversellDemo(t *testing.T) {
	mr := miniredis.RunT(t)
	var out bytes.Buffer
	if err := run(&out, mr.Addr(), config{workers: 3, buyers: 4, stock: 20}); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	res, err := round(mr.Addr(), true, config{workers: 3, buyers: 4, stock: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.sold != 20 || res.left != 0 {
		t.Fatalf("with the lock: sold %d, %d left; want 20 sold, 0 left", res.sold, res.left)
	}
	if !strings.Contains(out.String(), "lockyard") {
		t.Fatal("table lacks the locked row")
	}
}
