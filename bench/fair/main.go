// Command fair runs lockyard's fairness scenarios (scenarios.go) on a
// private redis-server: one key shared by clients that wait in different
// ways. With -base REV it builds itself against lockyard at that git
// revision and runs both builds, interleaved, each scenario in a child
// process of its own, and prints medians and ratios. It uses only
// lockyard's public API, so that it builds against older revisions. See
// README.md, "Performance", and `make bench`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var (
		only   = flag.String("scenarios", "all", "the scenarios to run, comma-separated, or all")
		reps   = flag.Int("reps", 3, "repetitions of every scenario (per build)")
		base   = flag.String("base", "", "also run every scenario on this program built against lockyard at this git revision, interleaved")
		worker = flag.String("worker", "", "internal: run one scenario in this process (-addr: the server)")
		addr   = flag.String("addr", "", "internal: the server of -worker")
	)
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker, *addr); err != nil {
			fmt.Fprintln(os.Stderr, "fair worker:", err)
			os.Exit(1)
		}
		return
	}
	var names []string
	for _, n := range strings.Split(*only, ",") {
		if n == "all" {
			for _, sc := range scenarios {
				names = append(names, sc.name)
			}
			continue
		}
		if _, ok := byName(n); !ok {
			fmt.Fprintf(os.Stderr, "fair: unknown scenario %q\n", n)
			os.Exit(2)
		}
		names = append(names, n)
	}
	if err := runAll(names, *reps, *base); err != nil {
		fmt.Fprintln(os.Stderr, "fair:", err)
		os.Exit(1)
	}
}
