// Package chaos is lockyard's fault suite (make chaos): tests that drive the
// registry against real redis-server processes on loopback while faults are
// injected (SIGKILL, SIGSTOP, CLIENT PAUSE, CLIENT KILL, restarts, maxmemory,
// failover, and network faults through an in-process toxiproxy), and check
// mutual exclusion with an interval log and a fenced resource. It is a
// separate module so that library users never download toxiproxy.
//
// Each test reports its figure with a "FIGURE" log line; make chaos collects
// them, and docs/RELIABILITY.md publishes them.
package chaos
