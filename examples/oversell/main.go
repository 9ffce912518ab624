// Command oversell is the classic order-oversell story, told with real
// processes. One order has a little stock; several worker processes, each
// with many buyer goroutines, try to buy it at once. Each purchase reads the
// stock, thinks for a moment, and writes stock-1. Without a lock they
// oversell; with a lockyard lock around the purchase the stock comes out
// exact.
//
// It starts an embedded Redis (miniredis) on a loopback port, or uses the
// server at REDIS_ADDR when that is set, and prints a table.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"text/tabwriter"

	"github.com/alicebob/miniredis/v2"
)

// A worker process is this program re-executed with these variables set.
const (
	workerEnv = "OVERSELL_WORKER" // "locked" or "unlocked"
	addrEnv   = "OVERSELL_ADDR"
	buyersEnv = "OVERSELL_BUYERS"
)

type config struct {
	workers, buyers, stock int
}

func main() {
	if mode := os.Getenv(workerEnv); mode != "" {
		buyers, _ := strconv.Atoi(os.Getenv(buyersEnv))
		if err := work(os.Getenv(addrEnv), mode == "locked", buyers); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.IntVar(&c.workers, "workers", 4, "worker processes")
	flag.IntVar(&c.buyers, "buyers", 8, "buyer goroutines per worker")
	flag.IntVar(&c.stock, "stock", 50, "items in stock")
	flag.Parse()
	if err := run(os.Stdout, os.Getenv("REDIS_ADDR"), c); err != nil {
		fmt.Fprintln(os.Stderr, "oversell:", err)
		os.Exit(1)
	}
}

// result is one round of the story.
type result struct {
	locked     bool
	sold, left int
}

// run plays the story without and with the lock against addr (an embedded
// Redis when empty) and prints the table to w.
func run(w io.Writer, addr string, c config) error {
	if addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
		defer mr.Close()
		addr = mr.Addr()
		fmt.Fprintf(w, "embedded Redis (miniredis) on %s\n", addr)
	}
	fmt.Fprintf(w, "%d items in stock; %d processes x %d buyers try to buy them\n\n", c.stock, c.workers, c.buyers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lock\tsold\tstock left\toversold\t")
	for _, locked := range []bool{false, true} {
		res, err := round(addr, locked, c)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", map[bool]string{false: "none", true: "lockyard"}[locked],
			res.sold, res.left, res.sold-c.stock)
	}
	return tw.Flush()
}

// round resets the order, runs the workers to completion and reads the result.
func round(addr string, locked bool, c config) (result, error) {
	if err := reset(addr, c.stock); err != nil {
		return result{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	mode := map[bool]string{false: "unlocked", true: "locked"}[locked]
	cmds := make([]*exec.Cmd, c.workers)
	for i := range cmds {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), workerEnv+"="+mode, addrEnv+"="+addr, buyersEnv+"="+strconv.Itoa(c.buyers))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return result{}, err
		}
		cmds[i] = cmd
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return result{}, fmt.Errorf("worker: %w", err)
		}
	}
	sold, left, err := readResult(addr)
	return result{locked: locked, sold: sold, left: left}, err
}
