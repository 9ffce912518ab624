package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ServerCPU returns the CPU time, user and system, that the server on c
// has used so far (INFO cpu, microsecond resolution).
func ServerCPU(c redis.Conn) (time.Duration, error) {
	s, err := redis.String(c.Do("INFO", "cpu"))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	seen := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		total += time.Duration(f * 1e9)
		seen++
	}
	if seen != 2 {
		return 0, fmt.Errorf("INFO cpu has no used_cpu_user and used_cpu_sys")
	}
	return total, nil
}

// CommandCalls sums the calls of INFO commandstats of the commands for
// which match(name) is true (name in lower case, as "evalsha"), commands
// run inside scripts included; 0 if INFO fails.
func CommandCalls(c redis.Conn, match func(name string) bool) int64 {
	s, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		return 0
	}
	var total int64
	for name, st := range parseCommandStats(s) {
		if match(name) {
			total += st.Calls
		}
	}
	return total
}
