// Command cycle shows where the Redis server's time goes in an
// uncontended lock+unlock cycle on a server without native
// compare-and-delete (Redis before 8.4): the SET that takes a free key,
// then the release script, built up one step at a time from redsync's
// (GET, DEL) to lockyard's drop.lua (the release of a lock that expects no
// waiter) and release.lua (the release that gives turns, with its five
// keys). Each step is a script run as EVALSHA, one round trip at a time as
// a lock's cycle is, in shuffled bursts; the figures are the server's own
// time per command (INFO commandstats usec), medians of the bursts.
//
//	cd bench && go run ./cycle [-rounds 30] [-burst 1000]
//
// With -multi it compares instead the server's time in an uncontended
// cycle of 5 keys: lockyard's AcquireAll and Release against
// bsm/redislock's ObtainMulti and Release (multi.go).
//
// The server is LOCKYARD_REDIS_SERVER, else redis-server on PATH.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/bench/internal/stat"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
)

func main() {
	rounds := flag.Int("rounds", 30, "bursts of each step")
	burst := flag.Int("burst", 1000, "cycles per burst")
	lua := flag.String("lua", "../registry/lua", "the registry's scripts")
	multi := flag.Bool("multi", false, "the 5-key cycle: AcquireAll against ObtainMulti")
	flag.Parse()
	var err error
	if *multi {
		err = runMulti(*rounds, *burst)
	} else {
		err = run(*rounds, *burst, *lua)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cycle:", err)
		os.Exit(1)
	}
}

// step is one release script: what it adds to the step before, its source
// and how many keys it takes.
type step struct {
	name string
	src  string
	keys int
}

func steps(dir string) ([]step, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return string(b), err
	}
	prelude, err := read("prelude.lua")
	if err != nil {
		return nil, err
	}
	drop, err := read("drop.lua")
	if err != nil {
		return nil, err
	}
	release, err := read("release.lua")
	if err != nil {
		return nil, err
	}
	const lean = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 3 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1`
	return []step{
		{"redsync's release: GET, DEL (1 key)", `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`, 1},
		{"+ PUBLISH, for Spring's and PubSubLock waiters", `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], KEYS[1]) return 1 else return 0 end`, 1},
		{"+ EXISTS of the wait queue (2 keys)", lean, 2},
		{"drop.lua as shipped (GET and EXISTS by pcall)", drop, 2},
		{"the same with release.lua's 5 keys", lean, 5},
		{"release.lua as shipped (5 keys)", prelude + release, 5},
	}, nil
}

func run(rounds, burst int, dir string) error {
	st, err := steps(dir)
	if err != nil {
		return err
	}
	srv, c, caps, err := server()
	if err != nil {
		return err
	}
	defer srv.Close()
	defer c.Close()
	scripts := make([]*redis.Script, len(st))
	for i, s := range st {
		scripts[i] = redis.NewScript(s.keys, s.src)
		if err := scripts[i].Load(c); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	keys := []any{"bench:k", "{bench:k}:queue", "{bench:k}:waiters", "{bench:k}:turn", "{bench:k}:polls"}
	evals := make([][]float64, len(st))
	var sets []float64
	order := make([]int, len(st))
	for i := range order {
		order[i] = i
	}
	n := 0
	for range rounds {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			if _, err := c.Do("CONFIG", "RESETSTAT"); err != nil {
				return err
			}
			for range burst {
				n++
				tok := "token-" + strconv.Itoa(n)
				if _, err := c.Do("SET", "bench:k", tok, "NX", "PX", 30000); err != nil {
					return err
				}
				args := append(append(make([]any, 0, 7), keys[:st[i].keys]...), tok, "lockyard-channel:bench:k")
				v, err := redis.Int(scripts[i].Do(c, args...))
				if err != nil || v != 1 {
					return fmt.Errorf("%s: released %d, %v", st[i].name, v, err)
				}
			}
			cs, err := redistest.CommandStatsOn(c)
			if err != nil {
				return err
			}
			evals[i] = append(evals[i], perCall(cs["evalsha"]))
			sets = append(sets, perCall(cs["set"]))
		}
	}
	set := stat.Median(sets)
	base := set + stat.Median(evals[0])
	fmt.Printf("%s %s, %d bursts of %d cycles per step, shuffled; server time per command (INFO commandstats), medians\n\n", caps.Name, caps.Version, rounds, burst)
	fmt.Printf("SET NX PX (the obtain of a free key, for every step): %.2f µs\n\n", set)
	fmt.Println("| release | EVALSHA µs | its step | cycle µs (SET + EVALSHA) | cycle / redsync's |")
	fmt.Println("|---|---:|---:|---:|---:|")
	prev := 0.0
	for i, s := range st {
		e := stat.Median(evals[i])
		d := "-"
		if i > 0 {
			d = fmt.Sprintf("%+.2f", e-prev)
		}
		fmt.Printf("| %s | %.2f | %s | %.2f | %.2f |\n", s.name, e, d, set+e, (set+e)/base)
		prev = e
	}
	return nil
}

// server starts a private redis-server without persistence, and returns
// it, a connection to it, and what it is.
func server() (*redistest.Server, redis.Conn, redistest.Caps, error) {
	srv, err := redistest.Start("--save", "", "--appendonly", "no")
	if err != nil {
		return nil, nil, redistest.Caps{}, err
	}
	c, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		srv.Close()
		return nil, nil, redistest.Caps{}, err
	}
	caps, err := redistest.CapsOf(srv.Addr)
	if err != nil {
		c.Close()
		srv.Close()
		return nil, nil, redistest.Caps{}, err
	}
	return srv, c, caps, nil
}

// perCall is a command's server time per call, in µs.
func perCall(s redistest.CmdStat) float64 {
	if s.Calls == 0 {
		return 0
	}
	return s.Usec / float64(s.Calls)
}
