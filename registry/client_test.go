package registry_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// resendingClient runs every obtain script twice and returns the second
// reply, as a client that retries after a lost reply (go-redis) does.
type resendingClient struct{ registry.Client }

func (c resendingClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "obtain" {
		if _, err := c.Client.Eval(ctx, s, keys, args); err != nil {
			return nil, err
		}
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// An obtain that a client sends twice grants the lock once, with its
// fencing token, instead of finding its own key and waiting out its TTL.
func TestObtainResentByClient(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		r := newRegClient(t, resendingClient{registry.NewPoolClient(b.pool(t))}, registry.WithFencing())
		l := obtain(t, r, "k")
		var first int64
		for i := int64(0); i < 3; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := l.LockContext(ctx)
			cancel()
			mustNil(t, err)
			if i == 0 {
				first = l.Token()
			}
			if want := first + i; first <= 0 || l.Token() != want {
				t.Fatalf("token %d, want %d (a resent obtain must not take a second token)", l.Token(), want)
			}
			mustNil(t, l.UnlockContext(bg(t)))
		}
	})
}

func TestNewWithClientRejectsNil(t *testing.T) {
	_, err := registry.NewWithClient(nil, "x")
	mustIs(t, err, registry.ErrInvalidConfig)
	var c registry.Client = (*nilClient)(nil)
	_, err = registry.NewWithClient(c, "x")
	mustIs(t, err, registry.ErrInvalidConfig)
	// A pool client on a nil pool fails each call instead of panicking.
	r, err := registry.NewWithClient(registry.NewPoolClient(nil), prefix(t))
	mustNil(t, err)
	defer r.Close()
	err = obtain(t, r, "k").LockContext(bg(t))
	mustIs(t, err, registry.ErrInvalidConfig)
}

type nilClient struct{ registry.Client }

func TestHashTag(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithHashTag(), registry.WithFencing(),
			registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
		pfx := prefix(t)
		r1 := newRegPrefix(t, b.pool(t), pfx, opts...)
		r2 := newRegPrefix(t, b.pool(t), pfx, opts...)
		l1, l2 := obtain(t, r1, "a}b"), obtain(t, r2, "a}b")
		if want := pfx + ":{a}b}"; l1.Key() != want {
			t.Fatalf("Key() = %q, want %q", l1.Key(), want)
		}
		mustNil(t, l1.LockContext(bg(t)))
		if v, _ := redis.Int64(b.do(t, "GET", l1.Key()+":fence"), nil); v != l1.Token() || v <= 0 {
			t.Fatalf("fence counter %s:fence = %d, want the token %d", l1.Key(), v, l1.Token())
		}
		// A waiter in another registry is woken by the release (its poll
		// interval is 10s), so the channel of a hash-tag key maps back to
		// its lock.
		got := lockInBackground(t, l2)
		waitFor(t, 5*time.Second, "the waiter in the wait queue", func() bool { return queueLen(t, b, l1.Key(), true) == 1 })
		mustNil(t, l1.UnlockContext(bg(t)))
		mustNil(t, recvWithin(t, got, 3*time.Second, "the woken waiter"))
		if _, err := r1.Obtain("}x"); !errors.Is(err, registry.ErrInvalidKey) {
			t.Fatalf(`Obtain("}x") = %v, want ErrInvalidKey (empty hash tag)`, err)
		}
	})
}

func TestReplicaAckOptions(t *testing.T) {
	pool := realBackend().pool(t)
	for _, opts := range [][]registry.Option{
		{registry.WithReplicaAck(0, time.Second)},
		{registry.WithReplicaAck(1, 0)},
		{registry.WithReplicaAck(1, 5*time.Second)}, // not below the 5s command timeout
		{registry.WithReplicaAck(1, time.Second), registry.WithExpireAfter(time.Second)},
	} {
		if _, err := registry.New(pool, "x", opts...); !errors.Is(err, registry.ErrInvalidConfig) {
			t.Errorf("New = %v, want ErrInvalidConfig", err)
		}
	}
}

// With WithReplicaAck, an obtain that no replica acknowledges is undone
// and reported; with a replica attached it succeeds.
func TestReplicaAck(t *testing.T) {
	b := realBackend()
	r := newReg(t, b.pool(t), registry.WithReplicaAck(1, 50*time.Millisecond), registry.WithIdleBetweenTries(20*time.Millisecond))
	l := obtain(t, r, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	err := l.LockContext(ctx)
	mustIs(t, err, registry.ErrReplicaAck)
	mustIs(t, err, context.DeadlineExceeded)
	// Undone at once, or, when the deadline cut the reply short, by the
	// registry's background cleanup.
	waitFor(t, 2*time.Second, "the unacknowledged lock to be undone", func() bool {
		n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil)
		return n == 0
	})
	if l.TryLock() {
		t.Fatal("TryLock succeeded without a replica")
	}

	master, replica := startReplicated(t)
	pool := master.Pool()
	defer pool.Close()
	r2 := newReg(t, pool, registry.WithReplicaAck(1, time.Second))
	l2 := obtain(t, r2, "k")
	mustNil(t, l2.LockContext(bg(t)))
	// The acknowledged key is on the replica.
	v, err := redis.String(replica.Do("GET", l2.Key()))
	mustNil(t, err)
	if !strings.Contains(v, ":") {
		t.Fatalf("replica has %q for the lock key", v)
	}
	mustNil(t, l2.UnlockContext(bg(t)))
}

// startReplicated starts a master of its own with one replica, online,
// both stopped at the end of the test.
func startReplicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master, err := redistest.Start("--repl-diskless-sync-delay", "0")
	mustNil(t, err)
	t.Cleanup(master.Close)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica, err = redistest.Start("--replicaof", host, port)
	mustNil(t, err)
	t.Cleanup(replica.Close)
	waitFor(t, 10*time.Second, "the replica to connect", func() bool {
		info := replicationInfo(master)
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	return master, replica
}

func replicationInfo(s *redistest.Server) string {
	info, _ := redis.String(s.Do("INFO", "replication"))
	return info
}

// With WithReplicaAck, renewals are acknowledged too: while the replica is
// attached the watchdog keeps the hold past several TTLs; once it is gone
// the renewals still reach the master but no longer move the hold's
// validity, so the holder learns of the loss within a TTL. A promoted
// replica would have expired the key at the last acknowledged deadline.
func TestReplicaAckRenewals(t *testing.T) {
	master, replica := startReplicated(t)
	pool := master.Pool()
	defer pool.Close()
	const ttl = 600 * time.Millisecond
	r := newReg(t, pool, registry.WithReplicaAck(1, 50*time.Millisecond), registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	l := obtain(t, r, "k")
	mustNil(t, l.LockContext(bg(t)))
	waitFor(t, 10*time.Second, "renewals past 3 TTLs", func() bool { return r.Stats().Renewals >= 7 })
	select {
	case <-l.Lost():
		t.Fatal("lost while the replica acknowledged every renewal")
	default:
	}
	mustNil(t, r.RenewLock(bg(t), "k"))

	_, err := replica.Do("REPLICAOF", "NO", "ONE")
	mustNil(t, err)
	waitFor(t, 10*time.Second, "the master to see the replica gone", func() bool {
		return strings.Contains(replicationInfo(master), "connected_slaves:0")
	})
	gone := time.Now()
	mustIs(t, r.RenewLock(bg(t), "k"), registry.ErrReplicaAck)
	select {
	case <-l.Lost():
		t.Logf("FIGURE replica ack: %d acknowledged renewals (TTL %v); lost %.0f ms after the replica left",
			r.Stats().Renewals, ttl, float64(time.Since(gone).Microseconds())/1000)
	case <-time.After(10 * ttl):
		t.Fatalf("not lost %v after the replica left (renewals: %d)", 10*ttl, r.Stats().Renewals)
	}
	mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
	if s := r.Stats(); s.LostLocks != 1 {
		t.Fatalf("Stats.LostLocks = %d, want 1", s.LostLocks)
	}
}

// faultyClient fails the first n runs of the script named script with err.
type faultyClient struct {
	registry.Client
	script string
	err    error
	mu     sync.Mutex
	n      int
}

func (c *faultyClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	c.mu.Lock()
	fail := s.Name() == c.script && c.n > 0
	if fail {
		c.n--
	}
	c.mu.Unlock()
	if fail {
		return nil, c.err
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// Error replies that a Cluster slot migration produces are retried: a
// release that meets ASK (the waiter's, uncontended: drop.lua), and a pass
// that meets TRYAGAIN (its keys split between two nodes), which becomes a
// release. Every injected reply is met.
func TestTransientRepliesAtRelease(t *testing.T) {
	for _, c := range []struct {
		script, reply string
		n             int
	}{
		{"drop", "ASK 866 127.0.0.1:7001", 2},                                  // retried twice
		{"pass", "TRYAGAIN Multiple keys request during rehashing of slot", 1}, // then a release
	} {
		t.Run(c.script, func(t *testing.T) {
			b := realBackend()
			fc := &faultyClient{Client: registry.NewPoolClient(b.pool(t)), script: c.script, n: c.n,
				err: &registry.ReplyError{Err: errors.New(c.reply)}}
			r := newRegClient(t, fc, registry.WithFencing())
			l := obtain(t, r, "k")
			h, ok := holdIn(t, l)
			if !ok {
				t.Fatal("TryLock failed")
			}
			waiter := lockInBackground(t, l)
			waitFor(t, 5*time.Second, "a local waiter", func() bool { return l.Waiters() == 1 })
			mustNil(t, h.unlock())
			mustNil(t, recvWithin(t, waiter, 5*time.Second, "the waiter"))
			if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
				t.Fatal("the lock key is still there")
			}
			// The waiter queued locally, whether it inherited the lock or
			// took it from Redis at its first attempt.
			if s := r.Stats(); s.Acquisitions != 2 || s.Contended != 1 {
				t.Fatalf("stats %+v, want 2 acquisitions, 1 contended", s)
			}
			fc.mu.Lock()
			defer fc.mu.Unlock()
			if fc.n != 0 {
				t.Fatalf("%d of the injected %s replies were not met", fc.n, c.script)
			}
		})
	}
}
