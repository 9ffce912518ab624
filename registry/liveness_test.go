package registry_test

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// slowIdle makes polling useless, so only wake-ups and TTLs can explain a
// fast acquisition.
const slowIdle = 10 * time.Second

// waitInGoroutine starts LockContext on l in a goroutine; the result arrives
// on the channel, and the lock is released right after a success.
func waitInGoroutine(t *testing.T, l *registry.RedisLock) <-chan error {
	got := make(chan error, 1)
	go func() {
		err := l.LockContext(bg(t))
		if err == nil {
			err = l.UnlockContext(bg(t))
		}
		got <- err
	}()
	return got
}

// A release in one registry wakes a PubSubLock waiter in another at once,
// whether the releasing registry is PubSubLock or SpinLock.
func TestPubSubHandOff(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		for _, releaser := range []registry.LockType{registry.PubSubLock, registry.SpinLock} {
			pfx := prefix(t)
			r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(releaser))
			r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
			l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
			l1.Lock()
			got := waitInGoroutine(t, l2)
			notWithin(t, got, 100*time.Millisecond, "waiter acquiring a held lock")
			l1.Unlock()
			mustNil(t, recvWithin(t, got, 500*time.Millisecond, "pub/sub hand-off from a "+releaser.String()))
		}
	})
}

// A holder that crashes publishes nothing: the waiter gets the lock when the
// key's TTL runs out, not after idleBetweenTries.
func TestPubSubWaiterAfterCrash(t *testing.T) {
	b := realBackend()
	r := newReg(t, b.pool(t), registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
	l := obtain(t, r, "k")
	b.do(t, "SET", l.Key(), "crashed-holder", "PX", 400)
	start := time.Now()
	mustNil(t, recvWithin(t, waitInGoroutine(t, l), 2*time.Second, "acquisition after the crashed holder's TTL"))
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("acquired after %v, before the crashed holder's key expired", el)
	}
}

// A Spring-style foreign release (DEL, then PUBLISH of the key on the
// channel) wakes a waiter, though the key had no TTL to wait for.
func TestForeignReleaseWakesWaiter(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		r := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
		l := obtain(t, r, "k")
		b.do(t, "SET", l.Key(), "spring-holder")
		got := waitInGoroutine(t, l)
		notWithin(t, got, 200*time.Millisecond, "acquiring a key held by Spring")
		b.do(t, "DEL", l.Key())
		b.do(t, "PUBLISH", pfx+"-channel:"+l.Key(), l.Key())
		mustNil(t, recvWithin(t, got, 500*time.Millisecond, "wake-up by a foreign release"))
	})
}

// After CLIENT KILL TYPE pubsub the subscriber comes back, and hand-offs
// keep working.
func TestSubscriberSurvivesClientKill(t *testing.T) {
	srv, err := redistest.Start()
	mustNil(t, err)
	defer srv.Close()
	b := &backend{name: "redis", addr: srv.Addr}
	pfx := prefix(t)
	r1 := newRegPrefix(t, b.pool(t), pfx)
	r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(slowIdle))
	l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
	numsub := func() int64 { // the subscriber by key's channel of k (keysub.go)
		v, _ := redis.Values(b.do(t, "PUBSUB", "NUMSUB", pfx+"-channel:"+l2.Key()), nil)
		if len(v) != 2 {
			return -1
		}
		n, _ := v[1].(int64)
		return n
	}
	for round := range 3 {
		l1.Lock()
		got := waitInGoroutine(t, l2)
		waitFor(t, 5*time.Second, "the subscriber to subscribe", func() bool { return numsub() == 1 })
		l1.Unlock()
		mustNil(t, recvWithin(t, got, 2*time.Second, "hand-off in round "+strconv.Itoa(round)))
		// The next round's hand-off, with a 10s idle, proves the subscriber is back.
		if n, _ := redis.Int(b.do(t, "CLIENT", "KILL", "TYPE", "pubsub"), nil); n != 1 {
			t.Fatalf("CLIENT KILL TYPE pubsub killed %d clients, want 1", n)
		}
	}
}

// With auto-renew a lock outlives its TTL fourfold against another
// registry; after release nothing renews it.
// Real server only: renewal races real expiry, which miniredis does not run.
func TestAutoRenew(t *testing.T) {
	b := realBackend()
	const ttl = 600 * time.Millisecond
	cp := &redistest.CountingPool{Pool: b.pool(t)}
	pfx := prefix(t)
	r := newRegPrefix(t, cp, pfx, registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	other := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
	l := obtain(t, r, "k")
	l.Lock()
	deadline := time.Now().Add(4 * ttl)
	for time.Now().Before(deadline) {
		if inGoroutine(other.TryLock) {
			t.Fatal("another registry took an auto-renewed lock")
		}
		time.Sleep(ttl / 10) // sample the lock over 4 TTLs
	}
	select {
	case <-l.Lost():
		t.Fatal("an auto-renewed hold was reported lost")
	default:
	}
	mustNil(t, l.UnlockContext(bg(t)))
	cp.Commands()
	time.Sleep(ttl) // three renewal periods in which nothing may be sent
	if got := cp.Commands(); len(got) != 0 {
		t.Fatalf("commands after release: %v", got)
	}
	if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
		t.Fatal("key came back after release")
	}
}

// A renewal that finds the key gone closes Lost() within a renewal period.
func TestRenewalDetectsLoss(t *testing.T) {
	b := realBackend()
	const ttl = 600 * time.Millisecond
	r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	l := obtain(t, r, "k")
	l.Lock()
	lost := l.Lost()
	b.do(t, "DEL", l.Key())
	start := time.Now()
	recvWithin(t, lost, 2*time.Second, "Lost() after the key was deleted")
	if el := time.Since(start); el > ttl/3+time.Second {
		t.Fatalf("loss seen after %v, more than a renewal period", el)
	}
	mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
	if _, ok := <-l.Lost(); ok {
		t.Fatal("Lost() of an unheld lock must be closed")
	}
}

// Without renewal, Lost() closes when validity ends.
func TestLostAtDeadline(t *testing.T) {
	b := realBackend()
	const ttl = 300 * time.Millisecond
	l := obtain(t, newReg(t, b.pool(t), registry.WithExpireAfter(ttl)), "k")
	start := time.Now()
	l.Lock()
	recvWithin(t, l.Lost(), ttl+2*time.Second, "Lost() at the validity deadline")
	if el := time.Since(start); el < ttl-ttl/10 {
		t.Fatalf("reported lost after %v, before the %v TTL", el, ttl)
	}
	mustIs(t, l.UnlockContext(bg(t)), registry.ErrLockLost)
}

// Fencing tokens strictly increase across every holder in 3 processes.
func TestFencingAcrossProcesses(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	const procs, iters = 3, 20
	var all []int
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bufio.Scanner, procs)
	for i := range cmds {
		cmd := childCmd("fence", b.addr, pfx, iters)
		out, err := cmd.StdoutPipe()
		mustNil(t, err)
		mustNil(t, cmd.Start())
		cmds[i], outs[i] = cmd, bufio.NewScanner(out)
	}
	for i, sc := range outs {
		prev := 0
		for sc.Scan() {
			tok, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			mustNil(t, err)
			if tok <= prev {
				t.Fatalf("process %d saw token %d after %d", i, tok, prev)
			}
			prev = tok
			all = append(all, tok)
		}
		mustNil(t, cmds[i].Wait())
	}
	slices.Sort(all)
	want := procs * childGoroutines * iters
	if len(all) != want || len(slices.Compact(slices.Clone(all))) != want || all[0] <= 0 || all[want-1] != all[0]+want-1 {
		t.Fatalf("tokens %v: want %d consecutive tokens, each exactly once", all, want)
	}
}

// Many held locks are renewed in pipelined batches, also after SCRIPT FLUSH
// (the batch falls back to EVAL). The TTL leaves a batch a second of slack
// (it is sent at a third of it): a fresh-clone CI on Redis 8.6, its two
// cores busy with -race, once saw one of 2000 keys expire at 900 ms.
func TestAutoRenewManyLocks(t *testing.T) {
	b := realBackend()
	const ttl, n = 1500 * time.Millisecond, 2000
	r := newReg(t, b.pool(t), registry.WithExpireAfter(ttl), registry.WithAutoRenew())
	locks := make([]*registry.RedisLock, n)
	for i := range locks {
		locks[i] = obtain(t, r, "k"+strconv.Itoa(i))
		mustNil(t, locks[i].LockContext(bg(t)))
	}
	b.do(t, "SCRIPT", "FLUSH")
	time.Sleep(3 * ttl) // several renewal periods; without renewal every key expires
	for _, l := range locks {
		if pttl, _ := redis.Int64(b.do(t, "PTTL", l.Key()), nil); pttl <= 0 {
			t.Fatalf("%s not renewed: PTTL %d", l.Key(), pttl)
		}
	}
	for _, l := range locks {
		mustNil(t, l.UnlockContext(bg(t)))
	}
}
