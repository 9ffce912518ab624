// Package procs runs a bench's worker processes and reads what the server
// did meanwhile: the part of bench/rw and bench/multi that is the same.
// Each worker is the bench's own executable run with -worker and a JSON
// spec; it prints one JSON report.
package procs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

// Run starts exe -worker SPEC for each of specs at once, waits for them
// all, and returns their reports, in order.
func Run[S, R any](exe string, specs []S) ([]R, error) {
	cmds := make([]*exec.Cmd, len(specs))
	outs := make([]*strings.Builder, len(specs))
	for i, sp := range specs {
		b, err := json.Marshal(sp)
		if err != nil {
			return nil, err
		}
		cmds[i] = exec.Command(exe, "-worker", string(b))
		outs[i] = &strings.Builder{}
		cmds[i].Stdout, cmds[i].Stderr = outs[i], os.Stderr
		if err := cmds[i].Start(); err != nil {
			return nil, err
		}
	}
	reps := make([]R, len(specs))
	var first error
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			first = cmp.Or(first, fmt.Errorf("process %d: %w", i, err))
			continue
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(outs[i].String())), &reps[i]); err != nil {
			first = cmp.Or(first, fmt.Errorf("process %d: %w: %q", i, err, outs[i].String()))
		}
	}
	return reps, first
}

// Server is what a redis-server had done at one moment: its command calls
// (INFO left out), its script calls, and its CPU time.
type Server struct {
	Calls, Scripts int64
	CPU            time.Duration
}

// Read returns the server's counters now.
func Read(conn redigo.Conn) Server {
	cpu, _ := redistest.ServerCPU(conn)
	return Server{Calls: redistest.CommandCalls(conn, func(n string) bool { return n != "info" }),
		Scripts: redistest.CommandCalls(conn, IsScript), CPU: cpu}
}

// Since returns what the server did from s0 to s, less the INFO-free calls
// that the two reads themselves made.
func (s Server) Since(s0 Server) Server {
	return Server{Calls: s.Calls - s0.Calls - 2, Scripts: s.Scripts - s0.Scripts, CPU: s.CPU - s0.CPU}
}

// IsScript reports whether a command name is a script call.
func IsScript(n string) bool { return n == "evalsha" || n == "eval" }

// Interleave runs every job of every contender reps times, the
// contenders in their order in even repetitions and in reverse in odd
// ones, and returns the results of each contender's job by its name
// (name), with the names in the order of the first repetition.
func Interleave[C, J, R any](reps int, cs []C, jobs []J, name func(C, J) string, run func(rep int, c C, j J) (R, error)) ([]string, Results[R], error) {
	res := Results[R]{}
	var names []string
	for rep := range reps {
		order := slices.Clone(cs)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			for _, j := range jobs {
				n := name(c, j)
				if rep == 0 && !slices.Contains(names, n) {
					names = append(names, n)
				}
				r, err := run(rep, c, j)
				if err != nil {
					return names, res, fmt.Errorf("%s: %w", n, err)
				}
				res[n] = append(res[n], r)
			}
		}
	}
	return names, res, nil
}

// Results are a scenario's runs of each job, by the job's name.
type Results[R any] map[string][]R

// Median returns the median of f over the runs of job name.
func (rs Results[R]) Median(name string, f func(R) float64) float64 {
	var xs []float64
	for _, r := range rs[name] {
		xs = append(xs, f(r))
	}
	return stat.Median(xs)
}

// Ratio prints "- what: a / b = ratio" of the medians of f, when both jobs
// ran.
func (rs Results[R]) Ratio(a, b string, f func(R) float64, what string) {
	if _, ok := rs[a]; !ok {
		return
	}
	if _, ok := rs[b]; !ok {
		return
	}
	fmt.Printf("- %s: %s / %s = %.2f\n", what, a, b, rs.Median(a, f)/rs.Median(b, f))
}
