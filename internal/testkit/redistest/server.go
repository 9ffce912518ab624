// Package redistest runs real redis-server processes on free loopback ports
// for tests, and wraps redigo pools to count and inspect commands.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// ErrNoServer means the redis-server binary is not installed.
var ErrNoServer = errors.New("redistest: redis-server not found on PATH: run `make test` (it installs Debian's redis-server) or `apt-get install -y redis-server`")

// Server is one redis-server process bound to 127.0.0.1.
type Server struct {
	Addr string
	port int
	dir  string
	args []string
	// conf, for a sentinel, is its configuration file (which it rewrites).
	conf string
	cmd  *exec.Cmd
	done chan error // receives the process's exit
}

// ServerEnv names the environment variable that picks the redis-server
// the tests start: the path of a redis-server (or valkey-server)
// executable, such as the wrappers that .ci/servers installs. Unset, it is
// the redis-server on PATH.
const ServerEnv = "LOCKYARD_REDIS_SERVER"

// serverBin returns the redis-server to start (ServerEnv).
func serverBin() (string, error) {
	if bin := os.Getenv(ServerEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("redistest: %s=%s: %w (run make servers)", ServerEnv, bin, err)
		}
		return bin, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoServer
	}
	return bin, nil
}

// Start starts redis-server on a free loopback port without persistence,
// with extra arguments appended (e.g. "--maxmemory", "1mb"), and waits until
// it answers PING.
func Start(extra ...string) (*Server, error) {
	bin, err := serverBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockyard-redis-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 { // a free port can be taken between probe and bind: retry
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: dir, args: extra}
		if last = s.start(bin); last == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, last
}

// StartSentinel starts redis-sentinel on a free loopback port, monitoring
// the master at masterAddr as name with the given quorum. It declares the
// master down after downAfter without a reply.
func StartSentinel(name, masterAddr string, quorum int, downAfter time.Duration) (*Server, error) {
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return nil, errors.New("redistest: redis-sentinel not found on PATH: apt-get install -y redis-sentinel")
	}
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lockyard-sentinel-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "sentinel.conf")
	ms := strconv.FormatInt(downAfter.Milliseconds(), 10)
	text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]s\n"+
		"sentinel failover-timeout %[1]s %[6]d\n"+
		"sentinel parallel-syncs %[1]s 2\n", name, host, port, quorum, ms, 4*downAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	port2, err := FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port2), port: port2, dir: dir, conf: conf}
	if err := s.start(bin); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return freePort() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(bin string) error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	if s.conf != "" {
		args = []string{s.conf, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}
	}
	s.cmd = exec.Command(bin, args...)
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.done = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan<- error) { done <- cmd.Wait() }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server exited: %v\n%s", err, log)
		default:
		}
		if s.ping() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond) // poll interval of a deadline loop
	}
	s.kill()
	return errors.New("redistest: redis-server did not answer PING within 10s")
}

func (s *Server) ping() error {
	c, err := redis.Dial("tcp", s.Addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Do("PING")
	return err
}

func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Signal sends sig to the server process (SIGSTOP and SIGCONT stall and
// resume it).
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil {
		return errors.New("redistest: server not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Stop kills the server (by pid) and waits for it to exit. Data is lost.
// The port stays reserved for Restart.
func (s *Server) Stop() { s.kill() }

// Restart starts the server again on the same port, with an empty dataset.
func (s *Server) Restart() error {
	s.kill()
	if s.conf != "" {
		return errors.New("redistest: a sentinel cannot be restarted")
	}
	bin, err := serverBin()
	if err != nil {
		return err
	}
	return s.start(bin)
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.kill()
	os.RemoveAll(s.dir)
}

// Pool returns a redigo pool for the server with short timeouts.
func (s *Server) Pool() *redis.Pool { return NewPool(s.Addr) }

// NewPool returns a redigo pool for addr with 2s dial, read and write
// timeouts and a bounded number of connections.
func NewPool(addr string) *redis.Pool {
	return &redis.Pool{
		MaxIdle:     16,
		MaxActive:   64,
		Wait:        true,
		IdleTimeout: time.Minute,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialConnectTimeout(2*time.Second),
				redis.DialReadTimeout(2*time.Second),
				redis.DialWriteTimeout(2*time.Second))
		},
	}
}

// Do runs one command on a fresh connection to the server.
func (s *Server) Do(cmd string, args ...any) (any, error) {
	return Do(s.Addr, cmd, args...)
}

// Do runs one command on a fresh connection to addr.
func Do(addr, cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second), redis.DialReadTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}
