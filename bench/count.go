package main

import (
	"bytes"
	"net"
	"strconv"
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
	c.c.cmds.Add(c.p.feed(b))
	return c.Conn.Write(b)
}

func (c *countConn) Read(b []byte) (int, error) {
	c.writer.Store(false)
	return c.Conn.Read(b)
}

// respParser counts the commands (RESP arrays of bulk strings) in a stream
// of client writes that may split anywhere.
type respParser struct {
	line []byte // partial header line
	skip int    // payload bytes, with their CRLF, still to skip
}

func (p *respParser) feed(b []byte) (cmds int64) {
	for len(b) > 0 {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
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
