package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// runMulti compares the server's time in an uncontended cycle of 5 keys:
// lockyard's AcquireAll and Release (multitake.lua, multidrop.lua) against
// bsm/redislock's ObtainMulti and Release, each library as shipped, in
// shuffled bursts on one private server; the figure is the server's time
// per cycle in the commands the clients sent (INFO commandstats usec:
// EVALSHA, whose inner commands count inside it), medians of the bursts,
// and the commands that ran per cycle.
func runMulti(rounds, burst int) error {
	srv, c, caps, err := server()
	if err != nil {
		return err
	}
	defer srv.Close()
	defer c.Close()
	pool := redistest.NewPool(srv.Addr)
	defer pool.Close()
	reg, err := registry.New(pool, "bench")
	if err != nil {
		return err
	}
	defer reg.Close()
	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer gr.Close()
	peer := redislock.New(gr)
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e"}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = "bsm:" + k
	}
	type contender struct {
		name  string
		cycle func() error
	}
	cs := []contender{
		{"lockyard AcquireAll, Release", func() error {
			le, err := reg.AcquireAll(ctx, keys, 0)
			if err != nil {
				return err
			}
			return le.Release(ctx)
		}},
		{"bsm/redislock ObtainMulti, Release", func() error {
			lk, err := peer.ObtainMulti(ctx, full, 30*time.Second, nil)
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
	}
	usec := make([][]float64, len(cs))
	calls := make([]map[string]float64, len(cs))
	for i := range cs { // warm up: scripts loaded, connections open
		calls[i] = map[string]float64{}
		if err := cs[i].cycle(); err != nil {
			return fmt.Errorf("%s: %w", cs[i].name, err)
		}
	}
	order := []int{0, 1}
	for range rounds {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			if _, err := c.Do("CONFIG", "RESETSTAT"); err != nil {
				return err
			}
			for range burst {
				if err := cs[i].cycle(); err != nil {
					return fmt.Errorf("%s: %w", cs[i].name, err)
				}
			}
			st, err := redistest.CommandStatsOn(c)
			if err != nil {
				return err
			}
			total := 0.0
			for name, s := range st {
				if name == "config|resetstat" || name == "config" || name == "info" {
					continue
				}
				calls[i][name] += float64(s.Calls) / float64(burst*rounds)
				if name == "evalsha" || name == "eval" {
					total += s.Usec
				}
			}
			usec[i] = append(usec[i], total/float64(burst))
		}
	}
	fmt.Printf("%s %s, %d bursts of %d uncontended cycles of 5 keys per library, shuffled; server time per cycle in its scripts (INFO commandstats), medians\n\n",
		caps.Name, caps.Version, rounds, burst)
	fmt.Println("| library | server µs per cycle | ratio | commands per cycle |")
	fmt.Println("|---|---:|---:|---|")
	base := stat.Median(usec[1])
	for i, cn := range cs {
		m := stat.Median(usec[i])
		list := ""
		for _, name := range []string{"evalsha", "eval", "exists", "mget", "set", "msetnx", "pexpire", "del", "publish", "get", "incr"} {
			if n := calls[i][name]; n >= 0.01 {
				list += " " + name + " " + strconv.FormatFloat(n, 'f', 2, 64)
			}
		}
		fmt.Printf("| %s | %.2f | %.2f |%s |\n", cn.name, m, m/base, list)
	}
	return nil
}
