package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// LinkProxy forwards TCP connections on a loopback port to target. While
// frozen, it drops what target sends: a replication link through it then
// loses the master's writes, as a network partition does.
type LinkProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	wg     sync.WaitGroup
	// mu guards conns.
	mu    sync.Mutex
	conns []net.Conn
}

// NewLinkProxy starts a proxy to target, closed at the end of t.
func NewLinkProxy(t testing.TB, target string) *LinkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	MustNil(t, err)
	p := &LinkProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's address.
func (p *LinkProxy) Addr() string { return p.ln.Addr().String() }

func (p *LinkProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, down, true)
		go p.pipe(down, up, false)
	}
}

// pipe copies from src to dst, dropping the bytes while frozen if fromTarget.
func (p *LinkProxy) pipe(src, dst net.Conn, fromTarget bool) {
	defer p.wg.Done()
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !(fromTarget && p.frozen.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// Freeze drops what target sends from now on.
func (p *LinkProxy) Freeze() { p.frozen.Store(true) }

// Close stops accepting, closes every connection and waits for the pipes.
func (p *LinkProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
