package redistest

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// SentinelMaster is the master name the sentinels of a SentinelSet watch.
const SentinelMaster = "lockyard"

// SentinelSet is a master, 2 replicas and 3 sentinels (quorum 2).
type SentinelSet struct {
	Master    *Server
	Links     []*LinkProxy // each replica's link to the master
	Replicas  []*Server
	Sentinels []*Server
}

// StartSentinelSet starts a SentinelSet, stopped at the end of t.
func StartSentinelSet(t testing.TB) *SentinelSet {
	t.Helper()
	s := &SentinelSet{}
	t.Cleanup(s.Close)
	var err error
	s.Master, err = Start("--repl-diskless-sync-delay", "0")
	MustNil(t, err)
	for range 2 {
		link := NewLinkProxy(t, s.Master.Addr)
		host, port, _ := net.SplitHostPort(link.Addr())
		r, err := Start("--replicaof", host, port, "--repl-diskless-sync-delay", "0")
		MustNil(t, err)
		s.Replicas = append(s.Replicas, r)
		s.Links = append(s.Links, link)
	}
	WaitFor(t, 20*time.Second, "2 replicas online", func() bool {
		info, _ := redis.String(s.Master.Do("INFO", "replication"))
		return strings.Count(info, "state=online") == 2
	})
	for range 3 {
		// Down after 3s: on a loaded machine a shorter time can fail over
		// before the test kills the master.
		sn, err := StartSentinel(SentinelMaster, s.Master.Addr, 2, 3*time.Second)
		MustNil(t, err)
		s.Sentinels = append(s.Sentinels, sn)
	}
	WaitFor(t, 30*time.Second, "sentinels to find each other and the replicas", func() bool {
		for _, sn := range s.Sentinels {
			others, _ := redis.Values(sn.Do("SENTINEL", "SENTINELS", SentinelMaster))
			replicas, _ := redis.Values(sn.Do("SENTINEL", "REPLICAS", SentinelMaster))
			if len(others) != 2 || len(replicas) != 2 {
				return false
			}
		}
		return true
	})
	return s
}

// Close stops every server.
func (s *SentinelSet) Close() {
	for _, x := range append(append(s.Sentinels, s.Replicas...), s.Master) {
		if x != nil {
			x.Close()
		}
	}
}

// CurrentMaster asks the first sentinel for the master's address.
func (s *SentinelSet) CurrentMaster() string {
	v, err := redis.Strings(s.Sentinels[0].Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
	if err != nil || len(v) != 2 {
		return ""
	}
	return net.JoinHostPort(v[0], v[1])
}

// SentinelAddrs returns the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	var addrs []string
	for _, sn := range s.Sentinels {
		addrs = append(addrs, sn.Addr)
	}
	return addrs
}
