package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// rwGrantReady returns a's lease on side holderWrite of an RWLock in one
// registry, and waiter, the same lock in registry r (made by wr) whose
// lease on side write waits in line with a grant record (so that a's
// release grants it the key, for ttl): got is that lease, and pfx their
// registry key. A first wait of r starts its turn subscriber; the next one
// asks for grants.
func rwGrantReady(t *testing.T, b *backend, holderWrite, write bool, ttl time.Duration, opts []registry.Option, wr func(pfx string) *registry.Registry) (pfx string, a *registry.Lease, holder, waiter *registry.RWLock, r *registry.Registry, got <-chan *registry.Lease) {
	t.Helper()
	pfx = prefix(t)
	holder = rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
	var err error
	if holderWrite {
		a, err = holder.AcquireWrite(bg(t), 0)
	} else {
		a, err = holder.AcquireRead(bg(t), 0)
	}
	mustNil(t, err)
	if wr != nil {
		r = wr(pfx)
	} else {
		r = newRegPrefix(t, b.pool(t), pfx, opts...)
	}
	waiter = rwlock(t, r, "k")
	rwListening(t, b, r, waiter, true)
	got = acquireRWFor(bg(t), waiter, write, ttl)
	waitRecord(t, b, pfx, holder.Key())
	return pfx, a, holder, waiter, r, got
}

// rwListening makes registry r listen for its turns: a first wait of l
// (on side write; 50ms, refused: another registry holds the key) starts
// r's turn subscriber, and once that wait's entry has left the line, r's
// later waits ask for grants.
func rwListening(t *testing.T, b *backend, r *registry.Registry, l *registry.RWLock, write bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg(t), 50*time.Millisecond)
	acquire := l.AcquireRead
	if write {
		acquire = l.AcquireWrite
	}
	_, err := acquire(ctx, 0)
	cancel()
	mustIs(t, err, context.DeadlineExceeded)
	waitFor(t, 5*time.Second, "the turn subscriber, and the first wait out of line", func() bool {
		return r.TurnsSubscribed() && queueLen(t, b, l.Key(), false) == 0
	})
}

// waitWriterGrant waits until the writer of lk is a grant token of r's.
func waitWriterGrant(t *testing.T, b *backend, lk string, r *registry.Registry) {
	t.Helper()
	waitFor(t, 5*time.Second, "the waiter's grant", func() bool {
		v, _ := redis.String(b.do(t, "HGET", lk, "w"), nil)
		return strings.HasPrefix(v, r.ID()+":g")
	})
}

// giveUpGivesBack ends (cancel) the wait whose lease would come on got,
// its grant's message lost, and fails unless it gets no lease and the
// hold granted to it is given back, freeing lk.
func giveUpGivesBack(t *testing.T, b *backend, lk string, got <-chan *registry.Lease, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	if le := recvWithin(t, got, 5*time.Second, "the waiter's end"); le != nil {
		t.Fatalf("the waiter got a lease after it gave up")
	}
	waitFor(t, 3*time.Second, "the lost grant's hold given back", func() bool {
		n, _ := redis.Int(b.do(t, "EXISTS", lk), nil)
		return n == 0
	})
}

var rwGrantee = []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(3 * time.Second), registry.WithFencing()}

// A writer's release grants the key to the reader in line (rwrules.lua,
// deliver), and the last reader's release to the writer: neither tries
// again. Each hold is the waiter's own, fenced after the one before, and
// its release frees the key.
func TestRWLockTurnGrantsKey(t *testing.T) {
	for _, holderWrite := range []bool{true, false} {
		t.Run(fmt.Sprintf("writer=%v", holderWrite), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				c := &scriptCounter{name: "rwacquire"}
				_, a, holder, _, _, got := rwGrantReady(t, b, holderWrite, !holderWrite, 0, rwGrantee, func(pfx string) *registry.Registry {
					c.Client = registry.NewPoolClient(b.pool(t))
					return newRegClientPrefix(t, c, pfx, rwGrantee...)
				})
				tries := c.n.Load()
				le := toldAfter(t, a, got, "the waiter")
				if n := c.n.Load() - tries; n != 0 {
					t.Fatalf("the waiter ran rwacquire.lua %d times after the release, want 0 (the release granted the key)", n)
				}
				if le.Token() <= a.Token() {
					t.Fatalf("fencing token %d after the holder's %d", le.Token(), a.Token())
				}
				if n := queueLen(t, b, holder.Key(), false); n != 0 {
					t.Fatalf("%d in line after the grant", n)
				}
				mustNil(t, le.Release(bg(t)))
				rwFree(t, b, holder.Key())
			})
		})
	}
}

// rwFree fails unless nobody holds the read-write lock key lk.
func rwFree(t *testing.T, b *backend, lk string) {
	t.Helper()
	if n, _ := redis.Int(b.do(t, "EXISTS", lk), nil); n != 0 {
		t.Fatalf("%s still held: %v", lk, b.do(t, "HGETALL", lk))
	}
}

// A grant whose message is lost is claimed by the waiter's next attempt,
// at its poll, which carries the granted token: the key is the waiter's,
// not held by nobody for its TTL.
func TestRWLockLostGrantClaimed(t *testing.T) {
	for _, write := range []bool{true, false} {
		t.Run(fmt.Sprintf("write=%v", write), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(300 * time.Millisecond)}
				_, a, holder, _, _, got := rwGrantReady(t, b, !write, write, 0, opts, func(pfx string) *registry.Registry {
					r := newRegPrefix(t, b.pool(t), pfx, opts...)
					r.LoseGrants(1)
					return r
				})
				mustNil(t, a.Release(bg(t)))
				le := recvWithin(t, got, 3*time.Second, "the waiter, at its poll (300ms), its grant's message lost")
				mustNil(t, le.Release(bg(t)))
				rwFree(t, b, holder.Key())
			})
		})
	}
}

// A waiter that gives up after its grant's message was lost gives the
// granted hold back once its entry has left the line: the key is free at
// once, not at the hold's TTL.
func TestRWLockLostGrantGivenBackWhenWaitEnds(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		pfx := prefix(t)
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		a, err := holder.AcquireRead(bg(t), 0)
		mustNil(t, err)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		r.LoseGrants(1)
		waiter := rwlock(t, r, "k")
		rwListening(t, b, r, waiter, true)
		ctx, cancel := context.WithCancel(bg(t))
		defer cancel()
		got := acquireRW(ctx, waiter, true)
		waitRecord(t, b, pfx, holder.Key())
		mustNil(t, a.Release(bg(t)))
		waitWriterGrant(t, b, holder.Key(), r)
		giveUpGivesBack(t, b, holder.Key(), got, cancel) // its poll is 5s away: it gives up before it claims the grant
	})
}

// A grant for a number the registry does not know (a record written by
// an attempt of an instance it no longer has) is given back: the key is
// free again, not held for nobody until its TTL.
func TestRWLockUnknownGrantGivenBack(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock)}
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		a, err := holder.AcquireWrite(bg(t), 0)
		mustNil(t, err)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		other := rwlock(t, r, "k") // a wait of r starts its turn subscriber
		rwListening(t, b, r, other, false)
		lk := holder.Key()
		id := r.ID() + "/999/r"
		in := fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())
		b.do(t, "ZADD", w.QueueKey(lk), 1, id)
		b.do(t, "HSET", w.WaitersKey(lk), id, "l "+in+" "+in, id+"|", r.ID()+":g 4242 60000 0 1")
		mustNil(t, a.Release(bg(t)))
		waitFor(t, 3*time.Second, "the unknown grant given back", func() bool {
			n, _ := redis.Int(b.do(t, "EXISTS", lk, w.ReadersKey(lk)), nil)
			return n == 0
		})
		if n := queueLen(t, b, lk, false); n != 0 {
			t.Fatalf("%d in line after the grant", n)
		}
	})
}

// A grant needs a registry that listens: an entry with a grant record of a
// registry that hears nothing (its process died) is told its turn, as
// before grants, and given no hold, which would idle the key until its
// TTL; so too beside a registry that subscribes to every registry's turns
// (the fallback of an ACL that refuses its own pattern), which hears no
// probe (wire.Layout.ProbeChannel).
func TestRWLockNoGrantToDeafWaiter(t *testing.T) {
	for _, wide := range []bool{false, true} {
		t.Run(fmt.Sprintf("wide=%v", wide), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				w := wire.Layout{Registry: pfx}
				if wide {
					psubscribed(t, b, w.AllTurnsPattern())
				}
				holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock)), "k")
				a, err := holder.AcquireWrite(bg(t), 0)
				mustNil(t, err)
				lk := holder.Key()
				id := "gone/1/w"
				in := fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())
				b.do(t, "ZADD", w.QueueKey(lk), 1, id)
				b.do(t, "HSET", w.WaitersKey(lk), id, "l "+in+" "+in, id+"|", "gone:g 1 60000 0 1")
				mustNil(t, a.Release(bg(t)))
				rwFree(t, b, lk)
				if n := queueLen(t, b, lk, false); n != 1 {
					t.Fatalf("%d in line, want the deaf entry still in it (told its turn)", n)
				}
				// Told its turn, not granted: its turn's end is marked, so that
				// it is dropped if it misses the turn (prelude.lua, settle).
				info, _ := redis.String(b.do(t, "HGET", w.WaitersKey(lk), id), nil)
				if f := strings.Fields(info); len(f) != 4 || f[3] <= fmt.Sprint(time.Now().Add(-time.Minute).UnixMilli()) {
					t.Fatalf("the deaf entry's info is %q; want a fourth field, the end of the turn it was told", info)
				}
			})
		})
	}
}

// A grant's hold is valid for the TTL of the attempt whose record the
// script found, from when that attempt was sent: not from when the grant
// came, since the script set the hold's expiry before (here half a second
// after the waiter's last attempt).
func TestRWLockGrantValidFromAttempt(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		pfx := prefix(t)
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		a, err := holder.AcquireWrite(bg(t), 0)
		mustNil(t, err)
		c := &scriptCounter{Client: registry.NewPoolClient(b.pool(t)), name: "rwacquire"}
		r := newRegClientPrefix(t, c, pfx, opts...)
		waiter := rwlock(t, r, "k")
		rwListening(t, b, r, waiter, false)
		const ttl = 3 * time.Second
		got := make(chan *registry.Lease, 1)
		go func() {
			le, _ := waiter.AcquireRead(bg(t), ttl)
			got <- le
		}()
		waitRecord(t, b, pfx, holder.Key())
		tries := c.n.Load()
		recorded := time.Now()
		time.Sleep(500 * time.Millisecond) // the time under test: between the waiter's last attempt and its grant
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 3*time.Second, "the reader, granted the key")
		if le == nil {
			t.Fatal("the reader's acquisition failed")
		}
		if n := c.n.Load() - tries; n != 0 {
			t.Fatalf("the reader ran rwacquire.lua %d times after its record, want 0 (granted)", n)
		}
		if left, most := r.ValidFor(le), ttl-time.Since(recorded); left > most {
			t.Fatalf("the granted hold is valid %v more, longer than its attempt's TTL from when it was sent (%v)", left, most)
		}
		mustNil(t, le.Release(bg(t)))
		rwFree(t, b, holder.Key())
	})
}

// A grant whose hold would be valid for less than two thirds of its TTL by
// the registry's count (the waiter's last attempt was sent long before)
// is left to the head's next attempt, woken at once: with the entry's
// token it gets the hold with a TTL from now. Handed over as it came, the
// lease of an auto-renewed 1s TTL had 150ms left, less than the
// watchdog's first renewal, and was lost at once while Redis held it.
func TestRWLockGrantNearlyExpiredClaimed(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second), registry.WithAutoRenew()}
		const ttl = 1 * time.Second
		_, a, _, _, r, got := rwGrantReady(t, b, true, false, ttl, opts, nil)
		time.Sleep(850 * time.Millisecond) // the holder keeps the key a while (the waiter sleeps its 5s poll)
		freshAfterGrant(t, r, a, got, ttl)
	})
}

// A grant that comes long after the waiter's last attempt (its TTL is
// shorter than the holder kept the key) neither gives the key back nor
// costs the waiter its place: the grant took its entry out of line, and
// its next attempt, woken at once, gets the granted hold, ahead of a
// writer that queued after it.
func TestRWLockLateGrantKeepsPlace(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		const ttl = 300 * time.Millisecond
		pfx, a, holder, _, _, first := rwGrantReady(t, b, true, true, ttl, opts, nil)
		// A second writer, of another registry, queues behind it.
		r2 := newRegPrefix(t, b.pool(t), pfx, opts...)
		second := acquireRW(bg(t), rwlock(t, r2, "k"), true)
		waitFor(t, 5*time.Second, "two in line", func() bool { return queueLen(t, b, holder.Key(), false) == 2 })
		time.Sleep(400 * time.Millisecond) // more than the first waiter's TTL since its last attempt
		mustNil(t, a.Release(bg(t)))
		select {
		case le := <-first:
			mustNil(t, le.Release(bg(t)))
			le2 := recvWithin(t, second, 6*time.Second, "the second")
			mustNil(t, le2.Release(bg(t)))
		case le := <-second:
			mustNil(t, le.Release(bg(t)))
			<-first
			t.Fatal("the second waiter got the key before the first, which was first in line")
		case <-time.After(6 * time.Second):
			t.Fatal("nobody got the key")
		}
	})
}

// lateGrantClient runs a hook before the waiter's n-th rwacquire, and holds
// every rwrelease of a grant token (the registry's give-backs) until that
// rwacquire has returned.
type lateGrantClient struct {
	registry.Client
	n       atomic.Int32
	at      int32
	before  func()
	claimed chan struct{}
}

func (c *lateGrantClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	switch s.Name() {
	case "rwacquire":
		if c.n.Add(1) == c.at {
			c.before()
			v, err := c.Client.Eval(ctx, s, keys, args)
			close(c.claimed)
			return v, err
		}
	case "rwrelease":
		if tok, _ := args[0].(string); strings.Contains(tok, ":g") {
			<-c.claimed
		}
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// The head's attempt that claims a grant's hold (rwacquire.lua, with the
// entry's token) is answered while the registry handles that grant's
// message: whatever the grant's validity, the hold is not given back
// under the head, and no other writer gets in while its lease is valid.
// (The give-backs of grant tokens are held until the claim returns.)
func TestRWLockGrantNotGivenBackUnderClaim(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(time.Second)}
		pfx := prefix(t)
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		c := &lateGrantClient{Client: registry.NewPoolClient(b.pool(t)), claimed: make(chan struct{})}
		r := newRegClientPrefix(t, c, pfx, opts...)
		waiter := rwlock(t, r, "k")
		// A first wait starts r's turn subscriber.
		a, err := holder.AcquireWrite(bg(t), 0)
		mustNil(t, err)
		rwListening(t, b, r, waiter, true)
		c.at = c.n.Load() + 2 // the wait's second attempt, at its poll (~1s)
		c.before = func() {
			// The holder releases just before it: the key is granted to the
			// waiter's first attempt's record, a poll interval old, more
			// than its TTL (300ms).
			mustNil(t, a.Release(context.Background()))
			waitFor(t, 5*time.Second, "the grant", func() bool {
				v, _ := redis.String(b.do(t, "HGET", holder.Key(), "w"), nil)
				return strings.HasPrefix(v, r.ID()+":g")
			})
			time.Sleep(50 * time.Millisecond) // the grant message is handled meanwhile: too late, given back
		}
		le, err := waiter.AcquireWrite(bg(t), 300*time.Millisecond)
		mustNil(t, err)
		defer le.Release(bg(t))
		time.Sleep(50 * time.Millisecond) // the give-back runs
		// Another writer, of another registry, now takes the key.
		other := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		le2, err := other.TryAcquireWrite(bg(t), 0)
		if err == nil {
			defer le2.Release(bg(t))
			select {
			case <-le.Lost():
				t.Fatalf("two writers: the other's TryAcquireWrite succeeded (the waiter's lease reports lost)")
			default:
				t.Fatalf("two writers: the waiter's lease is valid, not lost, and another writer took the key")
			}
		}
	})
}

// subDownClient refuses PSubscribe while down is set.
type subDownClient struct {
	registry.Client
	down atomic.Bool
}

func (c *subDownClient) PSubscribe(ctx context.Context, pattern string) (registry.Subscription, error) {
	if c.down.Load() {
		return nil, errors.New("lockyard-test: subscription refused")
	}
	return c.Client.PSubscribe(ctx, pattern)
}

// A grant's message is lost when the turn subscription breaks, and then
// the instance asks for no grants: its attempts still take the entry's
// grant token, and so get the granted hold at the next poll, not a new
// token that the hold keeps out until its TTL.
func TestRWLockLostGrantClaimedWhileSubscriberDown(t *testing.T) {
	b := realBackend()
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(500 * time.Millisecond)}
	pfx := prefix(t)
	holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
	a, err := holder.AcquireWrite(bg(t), 0)
	mustNil(t, err)
	c := &subDownClient{Client: registry.NewPoolClient(b.pool(t))}
	r := newRegClientPrefix(t, c, pfx, opts...)
	r.LoseGrants(1)
	waiter := rwlock(t, r, "k")
	rwListening(t, b, r, waiter, true)
	got := make(chan *registry.Lease, 1)
	go func() {
		le, _ := waiter.AcquireWrite(bg(t), 5*time.Second)
		got <- le
	}()
	waitRecord(t, b, pfx, holder.Key())
	mustNil(t, a.Release(bg(t)))
	waitFor(t, 5*time.Second, "the waiter's grant", func() bool {
		v, _ := redis.String(b.do(t, "HGET", holder.Key(), "w"), nil)
		return strings.HasPrefix(v, r.ID()+":g")
	})
	// The subscription breaks (its grant message was lost with it) and
	// stays down a while.
	c.down.Store(true)
	b.do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	select {
	case le := <-got:
		mustNil(t, le.Release(bg(t)))
	case <-time.After(3 * time.Second):
		v, _ := redis.String(b.do(t, "HGET", holder.Key(), "w"), nil)
		pttl := b.do(t, "PTTL", holder.Key())
		c.down.Store(false)
		le := <-got
		if le != nil {
			_ = le.Release(bg(t))
		}
		t.Fatalf("the waiter polled (500ms) for 3s without its own granted hold %s (PTTL %v): held by nobody until its TTL", v, pttl)
	}
	c.down.Store(false)
}

// The head woken by a grant it left to its attempt (too little validity
// left) tries at once: alone in line, it gets the free key at once, not
// at its poll.
func TestRWLockLateGrantWakesHead(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		const ttl = 300 * time.Millisecond
		_, a, _, _, _, got := rwGrantReady(t, b, true, true, ttl, opts, nil)
		time.Sleep(400 * time.Millisecond) // more than the waiter's TTL since its attempt
		released := time.Now()
		mustNil(t, a.Release(bg(t)))
		le := recvWithin(t, got, 6*time.Second, "the waiter")
		if le == nil {
			t.Fatal("no lease")
		}
		d := time.Since(released)
		mustNil(t, le.Release(bg(t)))
		if d > time.Second {
			t.Fatalf("the waiter, alone, got the free key %v after the release (its poll is 5s)", d)
		}
	})
}

// A reader's attempt that grants a reader ahead of it asks whether a
// writer waits behind its own place before the grant takes that reader
// out of line: the writer right behind it is found ({1, fence, 1}), and
// its registry's later readers do not share its hold ahead of that
// writer.
func TestRWLockWriterBehindGrantedReaderFound(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		lk := w.LockKey("k")
		psubscribed(t, b, w.TurnPattern("B")) // B listens (so that the probe is heard)
		in := fmt.Sprint(time.Now().Add(time.Minute).UnixMilli())
		for i, id := range []string{"B/1/r", "A/1/r", "C/1/w"} {
			b.do(t, "ZADD", w.QueueKey(lk), i+1, id)
			b.do(t, "HSET", w.WaitersKey(lk), id, "l "+in+" "+in)
		}
		b.do(t, "HSET", w.WaitersKey(lk), "B/1/r|", "B:g 7 60000 0 1")
		keys := []any{lk, w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk), w.FenceKey(lk), w.ReadersKey(lk)}
		args := []any{"A:tok", 10000, "A/1/r", 2, 100, 0, 0, w.TurnPrefix(), 5, 20, 2, 1, "r", 1, ""}
		v, err := redis.Values(b.do(t, "EVAL", append(append([]any{registry.RWAcquireSource, len(keys)}, keys...), args...)...), nil)
		mustNil(t, err)
		if len(v) != 3 {
			t.Fatalf("reply %v: the writer C/1/w waits behind the caller, want {1, 0, 1}", v)
		}
	})
}

// rwAcquireEval runs rwacquire.lua as waiter id of registry reg (a
// listener, reading) with grant record rec and claim flag claim, on lk's
// keys; inLine is the caller's knowledge of its entry (ARGV[14]): "1" in
// line, "0" not (it expects to be new in line).
func rwAcquireEval(t *testing.T, b *backend, w wire.Layout, lk, id, rec, claim, inLine string) []any {
	t.Helper()
	keys := []any{lk, w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk), w.FenceKey(lk), w.ReadersKey(lk)}
	args := []any{"A:g5", 10000, id, 2, 100, 0, 0, w.TurnPrefix(), 5, 20, 2, 1, "r", inLine, rec, claim}
	v, err := redis.Values(b.do(t, "EVAL", append(append([]any{registry.RWAcquireSource, len(keys)}, keys...), args...)...), nil)
	mustNil(t, err)
	return v
}

// A refused attempt's grant record never replaces one of a later number
// of the same registry (a resent attempt's, landing late): the grant of
// the later number stays in line, whether or not the attempt knows that
// its entry is in line (one that does not adds it first: enqueue). One
// that no longer asks for grants (its registry's turn subscription is
// down) deletes its record: no grant it would not hear.
func TestRWLockGrantRecordRules(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, inLine := range []string{"1", "0"} {
			t.Run("inLine="+inLine, func(t *testing.T) {
				pfx := prefix(t)
				w := wire.Layout{Registry: pfx}
				lk := w.LockKey("k")
				b.do(t, "HSET", lk, "w", "X:1") // a writer holds it: every attempt is refused
				b.do(t, "PEXPIRE", lk, 60000)
				id := "A/1/r"
				record := func() string {
					v, _ := redis.String(b.do(t, "HGET", w.WaitersKey(lk), id+"|"), nil)
					return v
				}
				attempt := func(rec, claim string) []any {
					return rwAcquireEval(t, b, w, lk, id, rec, claim, inLine)
				}
				if v := attempt("A:g 9 60000 0 3", "1"); v[0] != int64(0) {
					t.Fatalf("reply %v, want refused", v)
				}
				if r := record(); r != "A:g 9 60000 0 3" {
					t.Fatalf("record %q after the first attempt", r)
				}
				attempt("A:g 5 60000 0 1", "1")
				if r := record(); r != "A:g 9 60000 0 3" {
					t.Fatalf("record %q: an earlier number replaced a later one", r)
				}
				attempt("A:g 12 60000 0 1", "1")
				if r := record(); r != "A:g 12 60000 0 1" {
					t.Fatalf("record %q, want the later number's", r)
				}
				attempt("", "1")
				if r := record(); r != "" {
					t.Fatalf("record %q left by an attempt that asks for no grants", r)
				}
				if n := queueLen(t, b, lk, false); n != 1 {
					t.Fatalf("%d in line, want the waiter", n)
				}
			})
		}
	})
}

// noRWLeaveClient fails every rwleave.lua, as a network fault would.
type noRWLeaveClient struct{ registry.Client }

func (c *noRWLeaveClient) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if s.Name() == "rwleave" {
		return nil, errors.New("lockyard-test: rwleave refused")
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// The give-back of a lost grant's hold, when the waiter gives up, does not
// depend on its leave: a leave that fails still gives the hold back (a
// grant that comes later, to the entry left in line, is given back too).
func TestRWLockLostGrantGivenBackWhenLeaveFails(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		pfx := prefix(t)
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		a, err := holder.AcquireRead(bg(t), 0)
		mustNil(t, err)
		r := newRegClientPrefix(t, &noRWLeaveClient{Client: registry.NewPoolClient(b.pool(t))}, pfx, opts...)
		r.LoseGrants(1)
		waiter := rwlock(t, r, "k")
		ctx, cancel := context.WithTimeout(bg(t), 50*time.Millisecond)
		_, err = waiter.AcquireWrite(ctx, 0)
		cancel()
		mustIs(t, err, context.DeadlineExceeded)
		waitFor(t, 5*time.Second, "the turn subscriber", r.TurnsSubscribed)
		w := wire.Layout{Registry: pfx}
		b.do(t, "DEL", w.QueueKey(holder.Key()), w.WaitersKey(holder.Key())) // the first wait's entry and record, which its leave left
		ctx, cancel = context.WithCancel(bg(t))
		defer cancel()
		got := acquireRW(ctx, waiter, true)
		waitRecord(t, b, pfx, holder.Key())
		mustNil(t, a.Release(bg(t)))
		waitWriterGrant(t, b, holder.Key(), r)
		giveUpGivesBack(t, b, holder.Key(), got, cancel)
	})
}

// Readers granted by a writer's own attempt (it finds the key free, tells
// the readers in line ahead of it, and queues behind them) are granted
// with a writer behind them: a reader of theirs that comes later queues
// behind that writer (TryAcquireRead: ErrNotObtained) instead of sharing
// the granted hold ahead of it.
func TestRWLockGrantByWritersAttemptGatesLateReaders(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(5 * time.Second)}
		pfx := prefix(t)
		holder := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		a, err := holder.AcquireWrite(bg(t), 10*time.Second)
		mustNil(t, err)
		r := newRegPrefix(t, b.pool(t), pfx, opts...)
		x := rwlock(t, r, "k")
		rwListening(t, b, r, x, false)
		r1 := acquireRW(bg(t), x, false)
		waitRecord(t, b, pfx, holder.Key())
		// The writer's hold expires (no script runs): a DEL stands for it.
		b.do(t, "DEL", holder.Key())
		_ = a.Release(bg(t)) // ErrLockLost: its key is gone
		// A writer of a third registry tries: its rwacquire.lua gives the
		// reader in line its turn (a grant) and queues the writer behind it.
		w := rwlock(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
		wch := acquireRW(bg(t), w, true)
		le1 := leaseWithin(t, r1, 3*time.Second, "the granted reader")
		late, err := x.TryAcquireRead(bg(t), 0)
		if err == nil {
			_ = late.Release(bg(t))
			_ = le1.Release(bg(t))
			<-wch
			t.Fatal("a reader that came after the writer queued shared the granted hold ahead of it")
		}
		mustIs(t, err, registry.ErrNotObtained)
		mustNil(t, le1.Release(bg(t)))
		lw := leaseWithin(t, wch, 5*time.Second, "the writer")
		mustNil(t, lw.Release(bg(t)))
	})
}

// A writer refused behind readers tells each readers' registry that a
// writer waits (rwrules.lua, yield) when it comes into line, once: not
// when it tries again, whether or not it knows that its entry is in line
// (one that does not adds the entry first: enqueue's new).
func TestRWLockWriterYieldOnceInLine(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		w := wire.Layout{Registry: pfx}
		lk := w.LockKey("k")
		ps := psubscribed(t, b, w.TurnPattern("RA"))
		b.do(t, "HSET", lk, "r", 1) // registry RA's reader holds it
		b.do(t, "PEXPIRE", lk, 60000)
		b.do(t, "ZADD", w.ReadersKey(lk), time.Now().Add(time.Minute).UnixMilli(), "RA:g1")
		keys := []any{lk, w.QueueKey(lk), w.WaitersKey(lk), w.TurnKey(lk), w.PollsKey(lk), w.FenceKey(lk), w.ReadersKey(lk)}
		for i, inLine := range []string{"0", "1", "0"} {
			args := []any{"B:w1", 10000, "B/1/w", 2, 100, 0, 0, w.TurnPrefix(), 5, 20, 2, 1, "w", inLine, "", ""}
			v, err := redis.Values(b.do(t, "EVAL", append(append([]any{registry.RWAcquireSource, len(keys)}, keys...), args...)...), nil)
			mustNil(t, err)
			if v[0] != int64(0) {
				t.Fatalf("attempt %d: reply %v, want refused", i, v)
			}
		}
		var told []string
		for {
			m, ok := ps.ReceiveWithTimeout(200 * time.Millisecond).(redis.Message)
			if !ok {
				break
			}
			told = append(told, m.Channel)
		}
		if want := w.TurnChannel("RA", lk); len(told) != 1 || told[0] != want {
			t.Fatalf("the readers' registry was told %v; want once, on %s (when the writer came into line)", told, want)
		}
	})
}
