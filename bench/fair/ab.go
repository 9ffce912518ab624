package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/lockyard/lockyard/bench/internal/abbuild"
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
		exe, cleanup, err := abbuild.At(base, "./fair")
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

// quietLogger drops the registries' logs (a bench run's errors are counted,
// not printed).
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
