package registry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// aclFor returns the least-privilege ACL rules of docs/SECURITY.md for a
// registry key.
func aclFor(t *testing.T, registryKey string) []any {
	rules := []any{"on", ">pw-" + registryKey, "resetkeys", "resetchannels",
		"~" + registryKey + ":*", "~{" + registryKey + ":*", "~{*}" + registryKey + ":*", "&" + registryKey + "-channel:*", "&" + registryKey + "-turn:*",
		"-@all", "+evalsha", "+eval", "+psubscribe", "+ping", "+info",
		"+subscribe", "+unsubscribe", // the release subscriber by key
		"+get", "+set", "+del", "+incr", "+pexpire", "+pttl", "+publish",
		"+zadd", "+zrank", "+zrem", "+zrange", "+zcard", "+zscore", "+zcount", "+hget", "+hset", "+hdel", "+time",
		"+type", "+zremrangebyscore", "+exists", // a semaphore's, and the native release's
		"+hmget",                         // a read-write lock's
		"+mget",                          // AcquireAll's quick scripts
		"+command|info", "+command|docs"} // the native commands' probe
	// The native deletes, where the server has them (an ACL may not name a
	// command the server lacks).
	caps := capsOf(t, real.Addr)
	if caps.Del {
		rules = append(rules, "+delex")
	}
	if caps.DelIf {
		rules = append(rules, "+delifeq")
	}
	return rules
}

// userPool returns a pool that authenticates as user.
func userPool(t *testing.T, user string) *redis.Pool {
	p := &redis.Pool{DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", real.Addr, redis.DialUsername(user), redis.DialPassword("pw-"+user),
			redis.DialReadTimeout(2*time.Second))
	}}
	t.Cleanup(func() { p.Close() })
	return p
}

// The ACL of docs/SECURITY.md is enough for every feature (fencing, pub/sub
// wake-ups, auto-renew), and a user limited to another prefix can neither
// take nor release the locks.
func TestLeastPrivilegeACL(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	other := pfx + "-other"
	for _, u := range []string{pfx, other} {
		b.do(t, "ACL", append([]any{"SETUSER", u}, aclFor(t, u)...)...)
		t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", u) })
	}
	opts := []registry.Option{registry.WithFencing(), registry.WithAutoRenew(), registry.WithExpireAfter(time.Second),
		registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	r1 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	r2 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
	mustNil(t, l1.LockContext(bg(t)))
	if l1.Token() <= 0 { // a new counter, seeded from TIME
		t.Fatalf("token %d", l1.Token())
	}
	got := lockInBackground(t, l2)
	waitQueued(t, b, l1, 1)
	// Held past its TTL by renewals, then released; the waiter is woken
	// by the release message (it polls every 10s).
	until := time.Now().Add(1300 * time.Millisecond) // more than the TTL: only the watchdog keeps the lock
	waitFor(t, 5*time.Second, "a TTL and more", func() bool {
		select {
		case <-l1.Lost():
			t.Fatal("lost under the ACL: renewals denied?")
		default:
		}
		return time.Now().After(until)
	})
	mustNil(t, l1.UnlockContext(bg(t)))
	mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the release"))
	if n := r1.Stats().NativeFallbacks; n != 0 {
		t.Fatalf("%d native commands refused under the ACL, want none", n)
	}

	// Three waiters queue behind a holder and take their turns in order:
	// every command of the wait queue is allowed.
	mustNil(t, l1.LockContext(bg(t)))
	turns := make(chan int, 3)
	var ws [3]*queued
	for i := range ws {
		ws[i] = &queued{l: obtain(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k"), got: turns}
		ws[i].wait(t, b, i, i+1)
	}
	mustNil(t, l1.UnlockContext(bg(t)))
	for i := range ws {
		if j := recvWithin(t, turns, 5*time.Second, "a waiter's turn"); j != i {
			t.Fatalf("under the ACL, turn %d went to waiter %d", i, j)
		}
		ws[i].finish(t)
	}

	// Another prefix's user: no access to our keys, by lockyard or by hand.
	mustNil(t, l1.LockContext(bg(t)))
	defer l1.Unlock()
	intruder := newRegPrefix(t, userPool(t, other), pfx, registry.WithLogger(discardLogger))
	// Inspect reads under the ACL, labels included; the other user may not.
	info, err := r2.Inspect(bg(t), "k")
	mustNil(t, err)
	if len(info.Holders) != 1 || info.Holders[0].Label == "" || info.Fence != l1.Token() {
		t.Fatalf("Inspect under the ACL: %+v, want the holder with its label and fence %d", info, l1.Token())
	}
	if _, err := intruder.Inspect(bg(t), "k"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("another prefix's user: Inspect = %v, want a NOPERM reply", err)
	}
	il := obtain(t, intruder, "k")
	err = il.LockContext(bg(t))
	var re *registry.ReplyError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("another prefix's user: LockContext = %v, want a NOPERM reply at once", err)
	}
	c, err := userPool(t, other).GetContext(bg(t))
	mustNil(t, err)
	defer c.Close()
	if _, err := c.Do("DEL", l1.Key()); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("another prefix's user deleted our lock key: %v", err)
	}
	if _, err := c.Do("PSUBSCRIBE", pfx+"-channel:*"); err == nil {
		if _, err = c.Receive(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("another prefix's user subscribed to our channel: %v", err)
		}
	}
	select {
	case <-l1.Lost():
		t.Fatal("our lock was lost to the other user")
	default:
	}
}

// An ACL without +time, as older docs allowed without fencing: registries
// still exclude each other and hand the lock on, without a wait queue
// (its entries are dated by the server's clock): a waiter is woken by the
// release message.
func TestACLWithoutTime(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool { return r == "+time" })
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	r1 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	r2 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	l1, l2 := obtain(t, r1, "k"), obtain(t, r2, "k")
	mustNil(t, l1.LockContext(bg(t)))
	got := lockInBackground(t, l2)
	notWithin(t, got, 100*time.Millisecond, "the lock held by l1") // time for the waiter's failed attempt
	if n := queueLen(t, b, l1.Key(), false); n != 0 {
		t.Fatalf("%d waiters queued without +time", n)
	}
	mustNil(t, l1.UnlockContext(bg(t)))
	mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the release"))

	// A semaphore needs TIME: its Acquire fails at once, saying so.
	s := semaphore(t, r1, "sem", 2)
	_, err := s.Acquire(bg(t), 0)
	var re *registry.ReplyError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "TIME") {
		t.Fatalf("a semaphore without +time: %v, want a reply error that names TIME", err)
	}

	// Inspect reads a lock without TIME (no waiters: they are dated by
	// it), and refuses to call a held semaphore free.
	mustNil(t, l1.LockContext(bg(t)))
	info, err := r2.Inspect(bg(t), "k")
	if err != nil || len(info.Holders) != 1 {
		t.Fatalf("Inspect of a lock without +time: %+v, %v", info, err)
	}
	l1.Unlock()
	held := newRegPrefix(t, b.pool(t), pfx) // the default user: TIME allowed
	p, err := semaphore(t, held, "sem2", 2).Acquire(bg(t), 0)
	mustNil(t, err)
	defer p.Release(bg(t))
	if info, err := r2.Inspect(bg(t), "sem2"); err == nil || !strings.Contains(err.Error(), "TIME") {
		t.Fatalf("Inspect of a held semaphore without +time: %+v, %v; want an error that names TIME", info, err)
	}
}

// An ACL that lacks a command of the wait queue (here +zscore, as the docs
// left out before the queue was complete) makes a waiter's LockContext
// fail at once with the server's refusal (Redis 7.0: "ERR The user
// executing the script can't run this command"; later: "ERR ACL failure
// in script"), rather than wipe the
// queue at every try and lose the order of turns.
func TestACLWithoutQueueCommand(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool { return r == "+zscore" })
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	holder := obtain(t, newRegPrefix(t, userPool(t, pfx), pfx), "k")
	mustNil(t, holder.LockContext(bg(t)))
	defer holder.Unlock()
	waiter := obtain(t, newRegPrefix(t, userPool(t, pfx), pfx, registry.WithLogger(discardLogger)), "k")
	err := waiter.LockContext(bg(t))
	var re *registry.ReplyError
	refused := strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't run this command") ||
		strings.Contains(err.Error(), "has no permissions") // Redis 7.2+, Valkey: "ERR ACL failure in script: User u has no permissions to run the 'zscore' command"
	if !errors.As(err, &re) || !refused {
		t.Fatalf("a waiter under an ACL without +zscore: %v, want the server's refusal", err)
	}
}

// A semaphore works under the least-privilege ACL: permits with fencing and
// renewals, a waiter woken by the release message, a local pass, and no key
// left afterwards.
func TestLeastPrivilegeACLSemaphore(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, aclFor(t, pfx)...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts := []registry.Option{registry.WithFencing(), registry.WithAutoRenew(), registry.WithExpireAfter(time.Second),
		registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	s1 := semaphore(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k", 1)
	s2 := semaphore(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k", 1)
	a, err := s1.Acquire(bg(t), 0)
	mustNil(t, err)
	theirs := acquirePermit(bg(t), s2, 0)
	ours := acquirePermit(bg(t), s1, 0)
	notWithin(t, a.Lost(), 1300*time.Millisecond, "Lost under the ACL: renewals denied?")
	mustNil(t, a.Release(bg(t)))
	c := recvWithin(t, theirs, 3*time.Second, "the waiter woken by the release")
	if c == nil || c.Token() <= a.Token() {
		t.Fatalf("lease %v under the ACL", c)
	}
	mustNil(t, c.Release(bg(t)))
	d := recvWithin(t, ours, 3*time.Second, "the local lease")
	mustNil(t, d.Release(bg(t)))
	assertNoKeys(t, b, pfx)
}

// A read-write lock under the ACL: readers and a writer wait their turns,
// renewals and Downgrade are allowed, tokens increase, nothing is left.
func TestLeastPrivilegeACLRWLock(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, aclFor(t, pfx)...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts := []registry.Option{registry.WithFencing(), registry.WithAutoRenew(), registry.WithExpireAfter(time.Second),
		registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	l1 := rwlock(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k")
	l2 := rwlock(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k")
	r, err := l1.AcquireRead(bg(t), 0)
	mustNil(t, err)
	w := acquireRW(bg(t), l2, true)
	notWithin(t, r.Lost(), 1300*time.Millisecond, "Lost under the ACL: renewals denied?")
	mustNil(t, r.Release(bg(t)))
	wl := recvWithin(t, w, 3*time.Second, "the writer woken by the release")
	if wl == nil || wl.Token() <= r.Token() {
		t.Fatalf("write lease %v under the ACL", wl)
	}
	rd := acquireRW(bg(t), l1, false)
	mustNil(t, wl.Downgrade(bg(t)))
	r2 := recvWithin(t, rd, 3*time.Second, "the reader, after Downgrade")
	if r2 == nil {
		t.Fatal("AcquireRead failed under the ACL")
	}
	mustNil(t, r2.Release(bg(t)))
	mustNil(t, wl.Release(bg(t)))
	assertNoKeys(t, b, pfx)
}

// AcquireAll under the ACL: fenced, renewed past its TTL, a waiter of
// another registry woken by the release, nothing left.
func TestLeastPrivilegeACLMulti(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, aclFor(t, pfx)...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts := []registry.Option{registry.WithFencing(), registry.WithAutoRenew(), registry.WithExpireAfter(time.Second),
		registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	r1 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	r2 := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	le, err := r1.AcquireAll(bg(t), []string{"a", "b", "c"}, 0)
	mustNil(t, err)
	got := make(chan *registry.Lease, 1)
	go func() {
		w, err := r2.AcquireAll(bg(t), []string{"c", "d"}, 0)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	notWithin(t, le.Lost(), 1300*time.Millisecond, "Lost under the ACL: renewals denied?")
	mustNil(t, le.Release(bg(t)))
	w := recvWithin(t, got, 3*time.Second, "the waiter woken by the release")
	if w == nil || w.Tokens()[0] <= le.Tokens()[2] {
		t.Fatalf("the waiter's lease %v under the ACL, after %v", w, le.Tokens())
	}
	mustNil(t, w.Release(bg(t)))
	if n := b.do(t, "EXISTS", pfx+":a", pfx+":b", pfx+":c", pfx+":d"); n != int64(0) {
		t.Fatalf("%v lock keys left after the releases", n)
	}
}

// Under the ACL that docs/SECURITY.md gave before the release subscriber
// by key (PSUBSCRIBE, not SUBSCRIBE), a registry subscribes to the
// pattern, says so once at info level, and its waiters are woken by the
// release message as before.
func TestACLWithoutSubscribe(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	var rules []any
	for _, r := range aclFor(t, pfx) {
		if r != "+subscribe" && r != "+unsubscribe" {
			rules = append(rules, r)
		}
	}
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	logs := &logRecorder{}
	holder := newRegPrefix(t, userPool(t, pfx), pfx)
	r := newRegPrefix(t, userPool(t, pfx), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second),
		registry.WithLogger(slog.New(logs)))
	for round := range 2 {
		h, err := holder.Acquire(bg(t), "k", 0)
		mustNil(t, err)
		l := obtain(t, r, "k")
		got := lockInBackground(t, l)
		waitQueued(t, b, l, 1) // its attempt refused: it waits, polling every 10 s
		waitFor(t, 5*time.Second, "the pattern subscribed", func() bool {
			n, _ := redis.Int(b.do(t, "PUBSUB", "NUMPAT"), nil)
			return n == 1
		})
		mustNil(t, h.Release(bg(t)))
		mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the release, round "+fmt.Sprint(round)))
	}
	if _, byKey := registry.SubscribedKeys(r); byKey {
		t.Fatal("still subscribing by key after SUBSCRIBE was refused")
	}
	if n := registry.KeysAskedFor(r); n != 0 {
		t.Fatalf("%d keys remembered by the subscriber by key after it fell back to the pattern, want 0", n)
	}
	if n, warns := logs.count(slog.LevelInfo, "refused SUBSCRIBE"), logs.count(slog.LevelWarn, "subscriber dropped"); n != 1 || warns != 0 {
		t.Fatalf("%d infos and %d warnings of the release subscriber; want 1 info", n, warns)
	}
}

// A semaphore under the ACL that this page gave before the turn channels
// (no &registryKey-turn:*): a turn message the server refuses is a message
// lost, not a failed release; the turn subscriber, refused both its own
// pattern and the wide one, logs an error once and asks again only a minute
// later, and meanwhile waiters queue as pollers.
func TestACLWithoutTurnChannels(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	logs := &logRecorder{}
	a, s2, theirs, subs := refusedTurns(t, b, pfx, logs, registry.WithIdleBetweenTries(200*time.Millisecond),
		registry.WithRefusedRetry(100*time.Millisecond))
	// A listener first in line, whose turn the release tells: the server
	// refuses that message.
	w := wire.Layout{Registry: pfx}
	far := time.Now().Add(time.Hour).UnixMilli()
	b.do(t, "ZADD", w.QueueKey(s2.Key()), 1, "deaf/1")
	b.do(t, "HSET", w.WaitersKey(s2.Key()), "deaf/1", fmt.Sprintf("l %d %d", far, far))
	mustNil(t, a.Release(bg(t))) // its turn message is refused: a message lost
	c := recvWithin(t, theirs, 3*time.Second, "the waiter, polling (the listener's turn lapsed)")
	mustNil(t, c.Release(bg(t)))
	// Two more rounds of asking (own pattern, then every registry's), each
	// refused: one error in all, no warning, and its waiters still poll.
	n0 := subs.Load()
	waitFor(t, 5*time.Second, "two more rounds of subscribing", func() bool { return subs.Load() >= n0+4 })
	if n, warns := logs.count(slog.LevelError, "refused the semaphore turn channels"), logs.count(slog.LevelWarn, "subscriber dropped"); n != 1 || warns != 0 {
		t.Fatalf("%d errors and %d warnings of the turn subscriber; want 1 error, logged once", n, warns)
	}
	assertNoKeys(t, b, pfx)
}

// A turn subscriber refused the turn channels asks again: once the ACL
// allows them, its waiters listen again and are told their turns.
func TestACLTurnChannelsAllowedLater(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	logs := &logRecorder{}
	a, s2, theirs, _ := refusedTurns(t, b, pfx, logs, registry.WithIdleBetweenTries(3*time.Second), registry.WithRefusedRetry(200*time.Millisecond))
	b.do(t, "ACL", "SETUSER", pfx, "&"+pfx+"-turn:*")
	waitFor(t, 5*time.Second, "the waiter listening again", func() bool { return waiterKind(t, b, pfx, s2.Key()) == "l" })
	c := toldAfter(t, a, theirs, "the waiter")
	mustNil(t, c.Release(bg(t)))
	if n := logs.count(slog.LevelError, "refused the semaphore turn channels"); n != 1 {
		t.Fatalf("%d errors of the turn subscriber; want 1 (logged once)", n)
	}
}

// refusedTurns makes two PubSubLock registries under the least-privilege
// ACL without the turn channels, on a 1-permit semaphore: a holds its
// permit, and a lease of s2 (logging to logs) waits for it (theirs), once
// s2's turn subscriber was refused and its waiter queues as a poller (a
// listener would be given turns that it never hears of).
func refusedTurns(t *testing.T, b *backend, pfx string, logs *logRecorder, opts ...registry.Option) (a *registry.Lease, s2 *registry.Semaphore, theirs <-chan *registry.Lease, subs *atomic.Int64) {
	t.Helper()
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool { return r == "&"+pfx+"-turn:*" })
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts = append(opts, registry.WithLockType(registry.PubSubLock))
	s1 := semaphore(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k", 1)
	c := &psubCounter{Client: registry.NewPoolClient(userPool(t, pfx))}
	s2 = semaphore(t, newRegClientPrefix(t, c, pfx, append(opts, registry.WithLogger(slog.New(logs)))...), "k", 1)
	a, err := s1.Acquire(bg(t), 0)
	mustNil(t, err)
	theirs = acquirePermit(bg(t), s2, 0)
	waitFor(t, 5*time.Second, "the turn subscriber refused", func() bool {
		return logs.count(slog.LevelError, "refused the semaphore turn channels") == 1
	})
	waitFor(t, 5*time.Second, "the waiter queued as a poller", func() bool { return waiterKind(t, b, pfx, s2.Key()) == "p" })
	return a, s2, theirs, &c.n
}

// psubCounter counts the subscriptions asked of its Client.
type psubCounter struct {
	registry.Client
	n atomic.Int64
}

func (c *psubCounter) PSubscribe(ctx context.Context, pattern string) (registry.Subscription, error) {
	c.n.Add(1)
	return c.Client.PSubscribe(ctx, pattern)
}

// waiterKind returns how the only waiter in line for lk waits ("l" a
// listener, "p" a poller), or "" when not exactly one is.
func waiterKind(t *testing.T, b *backend, pfx, lk string) string {
	t.Helper()
	v := entryOf(t, b, pfx, lk)
	return v[:min(len(v), 1)]
}

// entryOf returns the queue entry ('KIND DUE LAPSE [END]') of the only
// waiter in line for lk, or "" when not exactly one is.
func entryOf(t *testing.T, b *backend, pfx, lk string) string {
	t.Helper()
	w := wire.Layout{Registry: pfx}
	ids, _ := redis.Strings(b.do(t, "ZRANGE", w.QueueKey(lk), 0, -1), nil)
	if len(ids) != 1 {
		return ""
	}
	v, _ := redis.String(b.do(t, "HGET", w.WaitersKey(lk), ids[0]), nil)
	return v
}

// A user whose ACL lacks the native delete (DELEX, DELIFEQ) and the probe
// (COMMAND) gets NOPERM for the delete once, where the server has one; the
// release script then serves every release: locks stay correct, and the
// waiter of another registry is woken. Where the server has no native
// delete the registry sends none (it tries, without the probe, and is told
// the command is unknown), and the same holds.
func TestNativeDeleteNOPERM(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool {
		return r == "+delex" || r == "+delifeq" || r == "+command|info" || r == "+command|docs"
	})
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	logs := &logRecorder{}
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
	// Each release after the waiter's is quiet (a native delete), not
	// one that still expects waiters.
	r := newRegPrefix(t, userPool(t, pfx), pfx, append(opts, registry.WithLogger(slog.New(logs)), registry.WithCrowdMemory(0))...)
	w := obtain(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k")
	l := obtain(t, r, "k")
	cyclesWithWaiter(t, b, l, w, 0)
	// Without the probe, each untried command is tried once: DELEX first,
	// then DELIFEQ; one of them at most exists, and is refused (NOPERM),
	// the other is unknown.
	st := r.Stats()
	if st.NativeFallbacks != 2 || st.LostLocks != 0 || st.ReleaseFailed != 0 {
		t.Fatalf("fallbacks %d, lost %d, failed releases %d; want 2 (DELEX, DELIFEQ), 0, 0", st.NativeFallbacks, st.LostLocks, st.ReleaseFailed)
	}
	// The refusals: NOPERM where the server has the command, else
	// unknown command; the first logged at info.
	caps := capsOf(t, b.addr)
	if n := logs.count(slog.LevelInfo, "refused a native command"); n != 1 {
		t.Fatalf("%d info records of a refusal, want 1", n)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var errs []string
	for _, rec := range logs.recs {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" && strings.Contains(rec.Message, "refused a native command") {
				errs = append(errs, a.Value.String())
			}
			return true
		})
	}
	noperm := slices.ContainsFunc(errs, func(e string) bool { return strings.HasPrefix(e, "NOPERM") })
	if len(errs) != 2 || noperm != (caps.Del || caps.DelIf) {
		t.Fatalf("refusals %q on %+v: want two, one of them NOPERM where the server has a native delete", errs, caps)
	}
}

// An ACL without +exists, as the docs allowed for a registry without a
// semaphore before the native release: locks are taken and released, and
// a waiter of another registry is woken (the scripts read the queue's
// first entry instead; a native release that cannot read the queue counts
// it as not empty).
func TestACLWithoutExists(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool { return r == "+exists" || r == "+type" || r == "+zremrangebyscore" })
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second),
		registry.WithLogger(discardLogger)}
	r := newRegPrefix(t, userPool(t, pfx), pfx, opts...)
	w := obtain(t, newRegPrefix(t, userPool(t, pfx), pfx, opts...), "k")
	l := obtain(t, r, "k")
	for range 3 { // uncontended: drop.lua, refused, then release.lua
		mustNil(t, l.LockContext(bg(t)))
		mustNil(t, l.UnlockContext(bg(t)))
	}
	cyclesWithWaiter(t, b, l, w, 1)
	if st := r.Stats(); st.ReleaseFailed != 0 || st.LostLocks != 0 {
		t.Fatalf("failed releases %d, lost %d; want none", st.ReleaseFailed, st.LostLocks)
	}
}

// A semaphore under an ACL without +exists: its first plain release has
// its EXISTS refused (the ZREM went through, and the script gives the turns
// in case waiters are queued); every later release is the script.
func TestACLWithoutExistsSemaphore(t *testing.T) {
	b := realBackend()
	pfx := prefix(t)
	rules := slices.DeleteFunc(aclFor(t, pfx), func(r any) bool { return r == "+exists" })
	b.do(t, "ACL", append([]any{"SETUSER", pfx}, rules...)...)
	t.Cleanup(func() { _, _ = redistest.Do(b.addr, "ACL", "DELUSER", pfx) })
	cp := &redistest.CountingPool{Pool: userPool(t, pfx)}
	s := semaphore(t, newRegPrefix(t, cp, pfx, registry.WithLogger(discardLogger)), "k", 1)
	for i, want := range [][]string{{"ZREM", "EXISTS", "EVALSHA"}, {"EVALSHA"}} {
		le, err := s.Acquire(bg(t), 0)
		mustNil(t, err)
		cp.Commands()
		mustNil(t, le.Release(bg(t)))
		if cmds := slices.DeleteFunc(cp.Commands(), func(c string) bool { return c == "EVAL" }); !slices.Equal(cmds, want) {
			t.Fatalf("release %d sent %v, want %v", i+1, cmds, want)
		}
		if n := zcard(t, b, s.Key()); n != 0 {
			t.Fatalf("release %d left %d permits", i+1, n)
		}
	}
}

// cyclesWithWaiter locks and unlocks l three times; in cycle at, w (of
// another registry) waits for the key meanwhile and must be woken by the
// release. After each release the key is gone.
func cyclesWithWaiter(t *testing.T, b *backend, l, w *registry.RedisLock, at int) {
	t.Helper()
	for i := range 3 {
		mustNil(t, l.LockContext(bg(t)))
		var got <-chan error
		if i == at {
			got = lockInBackground(t, w)
			waitQueued(t, b, l, 1)
		}
		mustNil(t, l.UnlockContext(bg(t)))
		if got != nil {
			mustNil(t, recvWithin(t, got, 3*time.Second, "the waiter woken by the release"))
		}
		if n, _ := redis.Int(b.do(t, "EXISTS", l.Key()), nil); n != 0 {
			t.Fatal("the key outlived its release")
		}
	}
}
