package redistest

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Caps is what a server is known to have, by its name and version (not by
// asking it, as a registry does): SET IFEQ (Redis 8.4+, Valkey 8.1+),
// DELEX (Redis 8.4+, Valkey 9.2+), DELIFEQ (Valkey 9.0+).
type Caps struct {
	Name, Version       string // "redis" or "valkey", and its version
	SetIfEq, Del, DelIf bool
}

// Native reports whether the server has a native compare-and-delete.
func (c Caps) Native() bool { return c.Del || c.DelIf }

// ExpectEnv names the server (such as redis-8.6) that make test started the
// tests on: CapsOf fails unless the server is that one, so that a pass
// never runs on another server unnoticed.
const ExpectEnv = "LOCKYARD_EXPECT_SERVER"

// CapsOf reads the server's name and version from INFO server.
func CapsOf(addr string) (Caps, error) {
	info, err := redis.String(Do(addr, "INFO", "server"))
	if err != nil {
		return Caps{}, err
	}
	field := func(name string) string {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				return v
			}
		}
		return ""
	}
	c := Caps{Name: "redis", Version: field("redis_version")}
	if v := field("valkey_version"); v != "" { // Valkey reports redis_version 7.2.4
		c.Name, c.Version = "valkey", v
	}
	var major, minor int
	if _, err := fmt.Sscanf(c.Version, "%d.%d", &major, &minor); err != nil {
		return Caps{}, fmt.Errorf("redistest: server version %q: %w", c.Version, err)
	}
	at := func(ma, mi int) bool { return major > ma || major == ma && minor >= mi }
	if c.Name == "redis" {
		c.SetIfEq, c.Del = at(8, 4), at(8, 4)
	} else {
		c.SetIfEq, c.Del, c.DelIf = at(8, 1), at(9, 2), at(9, 0)
	}
	if want := os.Getenv(ExpectEnv); want != "" && !strings.HasPrefix(c.Name+"-"+c.Version, want) {
		return Caps{}, fmt.Errorf("redistest: the tests run on %s %s, want %s (%s)", c.Name, c.Version, want, ServerEnv)
	}
	return c, nil
}

// CommandStats returns the calls of each command since the server started
// (INFO commandstats: "set", "evalsha", "delex", "command|info", ...).
func CommandStats(addr string) (map[string]int, error) {
	info, err := redis.String(Do(addr, "INFO", "commandstats"))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for name, st := range parseCommandStats(info) {
		out[name] = int(st.Calls)
	}
	return out, nil
}

// CmdStat is one command's line of INFO commandstats.
type CmdStat struct {
	Calls int64
	Usec  float64 // the server's time in the command, in µs (a script's inner commands included)
}

// CommandStatsOn returns INFO commandstats of the server on c, by command
// name in lower case.
func CommandStatsOn(c redis.Conn) (map[string]CmdStat, error) {
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		return nil, err
	}
	return parseCommandStats(info), nil
}

// parseCommandStats parses INFO commandstats.
func parseCommandStats(info string) map[string]CmdStat {
	out := map[string]CmdStat{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, stats, _ := strings.Cut(rest, ":")
		var st CmdStat
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[name] = st
	}
	return out
}
