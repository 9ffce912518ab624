package main

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// counter counts what clients send to the lock server: round trips (a
// write that follows a read, or the first write, on a connection: a
// pipeline flushed in several writes is one) and commands (the RESP arrays
// written).
type counter struct {
	writes atomic.Int64
	cmds   atomic.Int64
	names  names // of the commands sent
}

// names is a set of command names, as sent. Noting a name known already
// allocates nothing (the figures count allocations).
type names struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (n *names) note(name []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.m[string(name)]; !ok {
		if n.m == nil {
			n.m = map[string]struct{}{}
		}
		n.m[string(name)] = struct{}{}
	}
}

// sent returns the names, in lower case, of the commands sent so far.
func (c *counter) sent() []string {
	c.names.mu.Lock()
	defer c.names.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for k := range c.names.m {
		if k = strings.ToLower(k); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func (c *counter) snapshot() (roundTrips, cmds int64) { return c.writes.Load(), c.cmds.Load() }

// countConn wraps a client connection and counts its round trips and
// commands. Writes come from one goroutine at a time; rueidis reads in
// another goroutine meanwhile (a pipelined connection is full duplex, and
// a "round trip" there is a write after some reply arrived).
type countConn struct {
	net.Conn
	c      *counter
	p      respParser
	writer atomic.Bool // the last operation was a write
}

func wrap(nc net.Conn, c *counter) net.Conn { return &countConn{Conn: nc, c: c} }

func (c *countConn) Write(b []byte) (int, error) {
	if !c.writer.Swap(true) {
		c.c.writes.Add(1)
	}
	c.c.cmds.Add(c.p.feed(b, &c.c.names))
	return c.Conn.Write(b)
}

func (c *countConn) Read(b []byte) (int, error) {
	c.writer.Store(false)
	return c.Conn.Read(b)
}

// respParser counts the commands (RESP arrays of bulk strings) in a stream
// of client writes that may split anywhere, and notes their names.
type respParser struct {
	line   []byte // partial header line
	skip   int    // payload bytes, with their CRLF, still to skip
	naming bool   // the next bulk string is a command's name
	name   []byte // the name read so far (with its CRLF at the end)
}

// feed parses b, stores the name of each command in names, and returns how
// many commands began in b.
func (p *respParser) feed(b []byte, names *names) (cmds int64) {
	for len(b) > 0 {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			if p.naming {
				p.name = append(p.name, b[:n]...)
			}
			p.skip -= n
			b = b[n:]
			if p.skip == 0 && p.naming {
				names.note(bytes.TrimRight(p.name, "\r\n"))
				p.naming, p.name = false, p.name[:0]
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.line = append(p.line, b...)
			return cmds
		}
		p.line = append(p.line, b[:i+1]...)
		b = b[i+1:]
		line := bytes.TrimRight(p.line, "\r\n")
		p.line = p.line[:0]
		if len(line) == 0 {
			continue
		}
		switch line[0] {
		case '*':
			cmds++
			p.naming = true
		case '$':
			n, _ := strconv.Atoi(string(line[1:]))
			p.skip = n + 2
		}
	}
	return cmds
}

// mono reads CLOCK_MONOTONIC: one clock for every process of the machine,
// so that timestamps taken by different processes compare.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// cpuTime returns the user+system CPU time of this process in nanoseconds.
func cpuTime() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
