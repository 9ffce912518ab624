package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// build is one lockyard revision under test: a binary of this program.
type build struct {
	name string // "this", or the base revision
	exe  string
}

// runAll runs the scenarios in names reps times each, on a
// private redis-server, once per build per repetition in a shuffled order
// (this binary, and with base the same program built against lockyard at
// that revision), each run in a child process; then prints medians and the
// ratio of this build to the base.
func runAll(names []string, reps int, base string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	builds := []build{{name: "this", exe: self}}
	if base != "" {
		exe, cleanup, err := buildAt(base)
		if err != nil {
			return fmt.Errorf("building the bench against %s: %w", base, err)
		}
		defer cleanup()
		builds = append(builds, build{name: base, exe: exe})
	}
	srv, err := redistest.Start("--save", "", "--appendonly", "no")
	if err != nil {
		return err
	}
	defer srv.Close()
	res := map[string]map[string][]metrics{}
	for rep := range reps {
		for _, name := range names {
			order := slices.Clone(builds)
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, b := range order {
				fmt.Fprintf(os.Stderr, "fair %d/%d: %s, %s\n", rep+1, reps, name, b.name)
				m, err := child(b.exe, name, srv.Addr)
				if err != nil {
					return fmt.Errorf("%s (%s): %w", name, b.name, err)
				}
				if _, err := srv.Do("FLUSHALL"); err != nil {
					return err
				}
				if res[name] == nil {
					res[name] = map[string][]metrics{}
				}
				res[name][b.name] = append(res[name][b.name], m)
			}
		}
	}
	printFair(names, builds, res)
	return nil
}

// child runs one scenario in a child process of exe.
func child(exe, name, addr string) (metrics, error) {
	cmd := exec.Command(exe, "-worker", name, "-addr", addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var m metrics
	return m, json.Unmarshal(out, &m)
}

// runWorker runs one scenario in this process and prints its figures.
func runWorker(name, addr string) error {
	m, err := runFair(name, addr)
	if err != nil {
		return err
	}
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(m, k) // JSON has no NaN: a figure without data is left out
		}
	}
	return json.NewEncoder(os.Stdout).Encode(m)
}

func printFair(names []string, builds []build, res map[string]map[string][]metrics) {
	for _, name := range names {
		sc, _ := byName(name)
		fmt.Printf("### %s: %s (medians of %d runs)\n\n", sc.name, sc.title, len(res[name]["this"]))
		fmt.Printf("| build | %s |\n|---|%s\n", strings.Join(sc.cols, " | "), strings.Repeat("---:|", len(sc.cols)))
		for _, b := range builds {
			row := make([]string, len(sc.cols))
			for i, c := range sc.cols {
				row[i] = stat.Format(medianOf(res[name][b.name], c))
			}
			fmt.Printf("| %s | %s |\n", b.name, strings.Join(row, " | "))
		}
		if len(builds) == 2 {
			row := make([]string, len(sc.cols))
			for i, c := range sc.cols {
				row[i] = stat.Format(medianOf(res[name]["this"], c) / medianOf(res[name][builds[1].name], c))
			}
			fmt.Printf("| this / %s | %s |\n", builds[1].name, strings.Join(row, " | "))
		}
		for _, b := range builds {
			var runs []string
			for _, m := range res[name][b.name] {
				runs = append(runs, stat.Format(m[sc.cols[0]]))
			}
			fmt.Printf("\n%s, %s by run: %s", b.name, sc.cols[0], strings.Join(runs, " "))
		}
		fmt.Print("\n\n")
	}
}

func medianOf(ms []metrics, col string) float64 {
	var xs []float64
	for _, m := range ms {
		if v, ok := m[col]; ok {
			xs = append(xs, v)
		}
	}
	return stat.Median(xs)
}

// buildAt builds this program against lockyard at revision rev (its root
// module from git archive, in a workspace with the bench module of this
// checkout; the adapters, which the bench module requires but this
// program does not import, from rev where it has them), and returns the
// binary and a cleanup.
func buildAt(rev string) (string, func(), error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", nil, fmt.Errorf("git rev-parse: %w", err)
	}
	root := strings.TrimSpace(string(top))
	dir, err := os.MkdirTemp("", "lockyard-base-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		cleanup()
		return "", nil, err
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %q | tar -x -C %q", root, rev, src))
	if out, err := archive.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("git archive %s: %w: %s", rev, err, out)
	}
	// A revision from before the test harnesses moved under
	// internal/testkit gets this checkout's copy of redistest, which
	// imports nothing of the library.
	kit := filepath.Join(src, "internal", "testkit", "redistest")
	if _, err := os.Stat(kit); os.IsNotExist(err) {
		cp := exec.Command("cp", "-r", filepath.Join(root, "internal", "testkit"), filepath.Join(src, "internal", "testkit"))
		if out, err := cp.CombinedOutput(); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("copying internal/testkit: %w: %s", err, out)
		}
	}
	work := fmt.Sprintf(`go 1.26.0

use (
	%[1]q
	%[2]q
	%[3]q
	%[4]q
)

replace (
	github.com/lockyard/lockyard v0.1.0 => %[2]q
	github.com/lockyard/lockyard/goredis v0.1.0 => %[3]q
	github.com/lockyard/lockyard/rueidis v0.1.0 => %[4]q
)
`, filepath.Join(root, "bench"), src, adapterDir(root, src, "goredis"), adapterDir(root, src, "rueidis"))
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644); err != nil {
		cleanup()
		return "", nil, err
	}
	exe := filepath.Join(dir, "bench")
	cmd := exec.Command("go", "build", "-o", exe, "./fair")
	cmd.Dir = filepath.Join(root, "bench")
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build: %w: %s", err, out.String())
	}
	return exe, cleanup, nil
}

// adapterDir returns the adapter module's directory at rev, or in this
// checkout if rev has none.
func adapterDir(root, src, name string) string {
	if _, err := os.Stat(filepath.Join(src, name, "go.mod")); err == nil {
		return filepath.Join(src, name)
	}
	return filepath.Join(root, name)
}

// quietLogger drops the registries' logs (a bench run's errors are counted,
// not printed).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
