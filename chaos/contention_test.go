package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Scenario 1: 3 processes x 4 registries x 8 goroutines over 8 keys, every
// acquisition logged and checked at a fenced resource: no two intervals on a
// key overlap, no write is rejected, occupancy never exceeds 1. A quarter of
// the goroutines take leases (Acquire) and release them from another
// goroutine; they share the keys and local queues with the locks.
func TestContention(t *testing.T) {
	const (
		procs, regs, goroutines, keys = 3, 4, 8, 8
		total                         = 100_000
	)
	srv, res := startServer(t), startServer(t)
	dir := t.TempDir()
	start := time.Now()
	var children []*child
	for p := range procs {
		children = append(children, spawn(t, "contend", contendArgs{
			Addr: srv.Addr, Res: res.Addr, Prefix: "chaos1", Proc: fmt.Sprint(p),
			Out:  filepath.Join(dir, fmt.Sprintf("p%d.jsonl", p)),
			Keys: keys, Regs: regs, Goroutines: goroutines,
			Quota: (total + procs - 1) / procs, Deadline: 6 * time.Minute,
		}))
	}
	var acq, leases, lockErrs, unlockErrs, rejected, resErrs float64
	for _, c := range children {
		ev := c.event(t, 7*time.Minute, "done")
		acq += ev["acquisitions"].(float64)
		leases += ev["leases"].(float64)
		lockErrs += ev["lockErrors"].(float64)
		unlockErrs += ev["unlockErrors"].(float64)
		rejected += ev["rejected"].(float64)
		resErrs += ev["resourceErrors"].(float64)
		mustNil(t, c.wait(t, time.Minute))
	}
	elapsed := time.Since(start)
	var ivs []interval
	for p := range procs {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("p%d.jsonl", p)))
		mustNil(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var iv interval
			mustNil(t, json.Unmarshal(sc.Bytes(), &iv))
			ivs = append(ivs, iv)
		}
		f.Close()
	}
	bad := overlaps(ivs)
	peak := 0
	for k := range keys {
		p, _ := resource{res.Addr}.stats(t, fmt.Sprintf("k%d", k))
		peak = max(peak, p)
	}
	switch {
	case len(ivs) != int(acq):
		t.Errorf("%d intervals logged, %d acquisitions reported", len(ivs), int(acq))
	case acq < total:
		t.Errorf("%d acquisitions, want at least %d", int(acq), total)
	case leases < total/20:
		t.Errorf("%d of them leases, want at least %d", int(leases), total/20)
	}
	if len(bad) > 0 {
		t.Errorf("%d overlapping intervals, first %+v", len(bad), bad[0])
	}
	if rejected > 0 || peak > 1 || resErrs > 0 || lockErrs > 0 || unlockErrs > 0 {
		t.Errorf("rejected fenced writes %v, peak occupancy %d, resource errors %v, lock errors %v, unlock errors %v",
			rejected, peak, resErrs, lockErrs, unlockErrs)
	}
	figure(t, 1, "%d acquisitions (%d of them leases released by another goroutine) by %d processes x %d registries x %d goroutines on %d keys in %v (-race: %v): %d overlaps, %v fenced writes rejected, peak occupancy %d, %v errors",
		int(acq), int(leases), procs, regs, goroutines, keys, elapsed.Round(time.Second), raceEnabled, len(bad), rejected, peak, lockErrs+unlockErrs)
}
