package rueidislock_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// linkProxy forwards TCP connections on a loopback port to target. While
// frozen, it drops what target sends: a replication link through it then
// loses the master's writes, as a network partition does.
type linkProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	wg     sync.WaitGroup
	// mu guards conns.
	mu    sync.Mutex
	conns []net.Conn
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	mustNil(t, err)
	p := &linkProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) Addr() string { return p.ln.Addr().String() }

func (p *linkProxy) accept() {
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
func (p *linkProxy) pipe(src, dst net.Conn, fromTarget bool) {
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

func (p *linkProxy) freeze() { p.frozen.Store(true) }

// close stops accepting, closes every connection and waits for the pipes.
func (p *linkProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
