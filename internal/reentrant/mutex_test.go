package reentrant

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func run[T any](fn func() T) T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return <-ch
}

// waitWaiters polls until m has n queued goroutines, failing after 5s.
func waitWaiters(t *testing.T, m *Mutex, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for m.Waiters() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters after 5s, want %d", m.Waiters(), n)
		}
		time.Sleep(50 * time.Microsecond) // poll interval of a deadline loop
	}
}

func TestReentrancyAndOwnership(t *testing.T) {
	var m Mutex
	if how, err := m.Lock(context.Background(), nil, nil, Request{}, Self()); how != Fresh || err != nil {
		t.Fatalf("first Lock = %v, %v", how, err)
	}
	if how, err := m.Lock(context.Background(), nil, nil, Request{}, Self()); how != Reentered || err != nil || m.Depth(Self()) != 2 {
		t.Fatal("owner could not re-enter")
	}
	if ok, re, _ := m.TryLock(Request{}, Self()); !ok || !re || m.Depth(Self()) != 3 {
		t.Fatal("owner's TryLock did not re-enter")
	}
	if run(func() bool { ok, _, _ := m.TryLock(Request{}, Self()); return ok }) {
		t.Fatal("another goroutine's TryLock succeeded")
	}
	if err := run(func() error { return m.Unlock(Self()) }); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("non-owner Unlock = %v", err)
	}
	if last, _ := m.Leave(Self()); last || m.Depth(Self()) != 2 {
		t.Fatal("Leave at depth 3")
	}
	m.Unlock(Self())
	if last, _ := m.Leave(Self()); !last || m.Depth(Self()) != 1 {
		t.Fatal("Leave at depth 1 must report last and change nothing")
	}
	m.Unlock(Self())
	if m.Busy() || m.Depth(Self()) != 0 {
		t.Fatal("still held after the last Unlock")
	}
}

// Waiters get the mutex in arrival order; a waiter alone makes it busy.
func TestFIFOHandOff(t *testing.T) {
	var m Mutex
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	const n = 8
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Lock(context.Background(), nil, nil, Request{}, Self())
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			m.Unlock(Self())
		}()
		waitWaiters(t, &m, i+1) // queue them in a known order
	}
	m.Unlock(Self())
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("acquisition order %v, want FIFO", order)
		}
	}
}

// A goroutine that had to wait for another owner is told so: the registry
// counts it as a contended acquisition.
func TestLockSaysQueued(t *testing.T) {
	var m Mutex
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	got := make(chan How)
	go func() {
		how, err := m.Lock(context.Background(), nil, nil, Request{}, Self())
		if err != nil {
			t.Error(err)
		}
		got <- how
		m.Unlock(Self())
	}()
	waitWaiters(t, &m, 1)
	m.Unlock(Self())
	if how := <-got; how != Queued {
		t.Fatalf("the waiter's Lock = %v, want Queued (%v)", how, Queued)
	}
}

func TestWaiterIsBusyAndCancellable(t *testing.T) {
	var m Mutex
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := m.Lock(ctx, nil, nil, Request{}, Self()); done <- err }()
	waitWaiters(t, &m, 1)
	abort := make(chan struct{})
	aborted := make(chan error)
	go func() { _, err := m.Lock(context.Background(), abort, nil, Request{}, Self()); aborted <- err }()
	waitWaiters(t, &m, 2)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait = %v", err)
	}
	close(abort)
	if err := <-aborted; !errors.Is(err, ErrAborted) {
		t.Fatalf("aborted wait = %v", err)
	}
	m.Unlock(Self())
	if m.Busy() {
		t.Fatal("cancelled waiters left the mutex busy")
	}
}

// A waiter whose ctx ends just as ownership is handed to it either gets it
// (and unlocks) or leaves the mutex free: it is never left busy.
func TestCancelRacingHandOff(t *testing.T) {
	for range 200 {
		var m Mutex
		m.Lock(context.Background(), nil, nil, Request{}, Self())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := m.Lock(ctx, nil, nil, Request{}, Self())
			if err == nil {
				m.Unlock(Self())
			}
			done <- err
		}()
		waitWaiters(t, &m, 1)
		go cancel()
		m.Unlock(Self())
		<-done
		if m.Busy() {
			t.Fatal("mutex left busy after a cancel racing a hand-off")
		}
	}
}

func BenchmarkReentrantLockUnlock(b *testing.B) {
	var m Mutex
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Lock(ctx, nil, nil, Request{}, Self())
		m.Leave(Self())
	}
}

// HandOff passes ownership to the head of the queue only if there is one.
func TestHandOff(t *testing.T) {
	var m Mutex
	ctx := context.Background()
	if _, err := m.HandOff(Self()); err != ErrNotOwner {
		t.Fatalf("HandOff of a free mutex: %v, want ErrNotOwner", err)
	}
	m.Lock(ctx, nil, nil, Request{}, Self())
	if ok, err := m.HandOff(Self()); ok || err != nil {
		t.Fatalf("HandOff without waiters = %v, %v; want false, nil", ok, err)
	}
	if m.Depth(Self()) != 1 {
		t.Fatal("HandOff without waiters gave up ownership")
	}
	got := make(chan int)
	go func() {
		m.Lock(ctx, nil, nil, Request{}, Self())
		got <- m.Depth(Self())
		m.Unlock(Self())
		got <- 0
	}()
	waitWaiters(t, &m, 1)
	if ok, err := m.HandOff(Self()); !ok || err != nil {
		t.Fatalf("HandOff with a waiter = %v, %v; want true, nil", ok, err)
	}
	if d := <-got; d != 1 {
		t.Fatalf("the waiter got depth %d, want 1", d)
	}
	<-got
	if m.Busy() {
		t.Fatal("mutex busy after the waiter unlocked")
	}
}

// Revoke takes the mutex from an owner that will not unlock: the head of
// the queue gets it, and each of the old owner's holds then unlocks with
// ErrRevoked, once.
func TestRevoke(t *testing.T) {
	var m Mutex
	ctx := context.Background()
	owned, unlock, done := make(chan struct{}), make(chan struct{}), make(chan []error)
	go func() {
		m.Lock(ctx, nil, nil, Request{}, Self())
		m.Lock(ctx, nil, nil, Request{}, Self()) // two holds
		close(owned)
		<-unlock
		revoked := m.Revoked(Self())
		_, err1 := m.Leave(Self())
		err2 := m.Unlock(Self())
		err3 := m.Unlock(Self())
		done <- []error{err1, err2, err3, map[bool]error{true: nil, false: errors.New("Revoked false")}[revoked]}
	}()
	<-owned
	if m.Revoke(func() bool { return false }) {
		t.Fatal("Revoke succeeded although ok said no")
	}
	got := make(chan How, 1)
	go func() {
		how, err := m.Lock(ctx, nil, observer(func() {
			if !m.Revoke(func() bool { return true }) {
				t.Error("Revoke of an owner that is not leaving failed")
			}
		}), Request{}, Self())
		if err != nil {
			t.Error(err)
		}
		got <- how
	}()
	if how := <-got; how != Queued {
		t.Fatalf("the waiter got the mutex %v, want Queued", how)
	}
	if m.Depth(Self()) != 0 || !m.Busy() {
		t.Fatal("the mutex is not owned by the waiter")
	}
	close(unlock)
	errs := <-done
	if errs[0] != ErrRevoked || errs[1] != ErrRevoked || errs[2] != ErrNotOwner || errs[3] != nil {
		t.Fatalf("the revoked owner's Leave, Unlock, Unlock, Revoked: %v; want ErrRevoked twice, then ErrNotOwner; Revoked true", errs)
	}
}

// An owner finishing its last hold (Leave reported last) is not revoked.
func TestRevokeSparesLeavingOwner(t *testing.T) {
	var m Mutex
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	if last, err := m.Leave(Self()); !last || err != nil {
		t.Fatalf("Leave = %v, %v", last, err)
	}
	if m.Revoke(func() bool { return true }) {
		t.Fatal("Revoke took the mutex from an owner finishing its last hold")
	}
	if err := m.Unlock(Self()); err != nil {
		t.Fatal(err)
	}
	m.Lock(context.Background(), nil, nil, Request{}, Self())
	if !m.Revoke(func() bool { return true }) || m.Busy() {
		t.Fatal("Revoke after a new Lock did not free the mutex")
	}
}

// observer is a func as an Observer.
type observer func()

func (o observer) Queued() { o() }

// Next is the request of the goroutine that HandOff would hand the mutex to.
func TestNext(t *testing.T) {
	var m Mutex
	ctx := context.Background()
	m.Lock(ctx, nil, nil, Request{}, Self())
	if _, ok := m.Next(); ok {
		t.Fatal("Next without waiters reported one")
	}
	first, cancel := context.WithCancel(ctx)
	gave, got := make(chan error, 1), make(chan int64, 1)
	go func() { _, err := m.Lock(first, nil, nil, Request{TTL: 5}, Self()); gave <- err }()
	waitWaiters(t, &m, 1)
	go func() {
		m.Lock(ctx, nil, nil, Request{TTL: 7}, Self())
		got <- 7
		m.Unlock(Self())
	}()
	waitWaiters(t, &m, 2)
	if req, ok := m.Next(); !ok || req.TTL != 5 {
		t.Fatalf("Next = %+v, %v; want TTL 5, the head of the queue", req, ok)
	}
	cancel()
	if err := <-gave; err == nil {
		t.Fatal("the cancelled waiter got the mutex")
	}
	if req, ok := m.Next(); !ok || req.TTL != 7 {
		t.Fatalf("Next after the head left = %+v, %v; want TTL 7", req, ok)
	}
	m.Unlock(Self())
	if g := <-got; g != 7 {
		t.Fatal("the mutex went elsewhere")
	}
}

// A token owner (NewOwner) is taken by one goroutine and released by
// another; it excludes goroutines and other tokens, queues with them in
// FIFO order, and loses its holds to Revoke like a goroutine.
func TestTokenOwner(t *testing.T) {
	var m Mutex
	ctx := context.Background()
	a, b := NewOwner(), NewOwner()
	if a == b || a >= 0 || b >= 0 {
		t.Fatalf("NewOwner gave %d and %d, want two distinct negative owners", a, b)
	}
	if how, err := m.Lock(ctx, nil, nil, Request{}, a); how != Fresh || err != nil {
		t.Fatalf("Lock(a) = %v, %v", how, err)
	}
	if o := m.Owner(); o != a {
		t.Fatalf("Owner %d, want token a %d", o, a)
	}
	if ok, _, _ := m.TryLock(Request{}, Self()); ok {
		t.Fatal("a goroutine's TryLock succeeded while token a holds the mutex")
	}
	if ok, _, _ := m.TryLock(Request{}, b); ok {
		t.Fatal("token b's TryLock succeeded while token a holds the mutex")
	}
	got := make(chan How, 1)
	go func() { how, _ := m.Lock(ctx, nil, nil, Request{}, b); got <- how }()
	waitWaiters(t, &m, 1)
	// Another goroutine releases a, and the mutex goes to the waiting b.
	if err := run(func() error { return m.Unlock(a) }); err != nil {
		t.Fatalf("Unlock(a) from another goroutine: %v", err)
	}
	if how := <-got; how != Queued || m.Depth(b) != 1 {
		t.Fatalf("b got the mutex %v at depth %d, want Queued at 1", how, m.Depth(b))
	}
	if err := m.Unlock(a); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("second Unlock(a) = %v, want ErrNotOwner", err)
	}
	if !m.Revoke(func() bool { return true }) || !m.Revoked(b) || m.Busy() || m.Owner() != 0 {
		t.Fatal("Revoke did not take the mutex from token b")
	}
	if _, err := m.Leave(b); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Leave(b) after Revoke = %v, want ErrRevoked", err)
	}
}

// lockIn makes a new owner lock m as req asks, in a goroutine, and returns
// the owner and a channel that yields Lock's error once it returns.
func lockIn(ctx context.Context, m *Mutex, req Request) (Owner, <-chan error) {
	who := NewOwner()
	done := make(chan error, 1)
	go func() { _, err := m.Lock(ctx, nil, nil, req, who); done <- err }()
	return who, done
}

// granted fails the test unless done yields nil within 5s.
func granted(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not granted within 5s", what)
	}
}

// pending fails the test if done has yielded.
func pending(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) but should still wait", what, err)
	default:
	}
}

func weighted(n int64) Request { return Request{Mode: Weighted, Weight: n} }

// n of N: weights add up to the size at most; a release wakes the waiters
// at the head that fit, in order.
func TestWeighted(t *testing.T) {
	ctx := context.Background()
	m := NewWeighted(3)
	a, b := NewOwner(), NewOwner()
	if how, err := m.Lock(ctx, nil, nil, weighted(2), a); how != Fresh || err != nil {
		t.Fatalf("Lock(2 of 3) = %v, %v", how, err)
	}
	if ok, _, err := m.TryLock(weighted(1), b); !ok || err != nil {
		t.Fatalf("TryLock(1 of the 1 left) = %v, %v", ok, err)
	}
	if m.Owner() != 0 {
		t.Fatalf("Owner = %d with two owners, want 0", m.Owner())
	}
	_, c := lockIn(ctx, m, weighted(1))
	waitWaiters(t, m, 1)
	_, d := lockIn(ctx, m, weighted(1))
	waitWaiters(t, m, 2)
	if err := m.Unlock(b); err != nil {
		t.Fatal(err)
	}
	granted(t, c, "the first waiter, after 1 was given back")
	pending(t, d, "the second waiter, with nothing free")
	if err := m.Unlock(a); err != nil {
		t.Fatal(err)
	}
	granted(t, d, "the second waiter, after 2 were given back")
	if m.Waiters() != 0 || !m.Busy() {
		t.Fatalf("waiters %d, busy %v", m.Waiters(), m.Busy())
	}
}

// A waiter that does not fit yet holds up the smaller ones behind it, even
// those that would fit now, and TryLock does not pass it either (x/sync's
// rule: a large request is not starved).
func TestWeightedNoBarging(t *testing.T) {
	ctx := context.Background()
	m := NewWeighted(3)
	a := NewOwner()
	m.Lock(ctx, nil, nil, weighted(2), a)
	big, bigDone := lockIn(ctx, m, weighted(3))
	waitWaiters(t, m, 1)
	_, small := lockIn(ctx, m, weighted(1))
	waitWaiters(t, m, 2)
	if ok, _, _ := m.TryLock(weighted(1), NewOwner()); ok {
		t.Fatal("TryLock(1) passed a waiter that was queued first")
	}
	pending(t, small, "a small waiter behind a large one")
	m.Unlock(a)
	granted(t, bigDone, "the large waiter")
	pending(t, small, "the small waiter while the large one holds all")
	m.Unlock(big)
	granted(t, small, "the small waiter")
}

// The head of the queue giving up lets those behind it that fit go.
func TestWeightedHeadGivesUp(t *testing.T) {
	ctx := context.Background()
	m := NewWeighted(2)
	m.Lock(ctx, nil, nil, weighted(1), NewOwner())
	cctx, cancel := context.WithCancel(ctx)
	_, big := lockIn(cctx, m, weighted(2))
	waitWaiters(t, m, 1)
	_, small := lockIn(ctx, m, weighted(1))
	waitWaiters(t, m, 2)
	pending(t, small, "a small waiter behind a large one")
	cancel()
	if err := <-big; !errors.Is(err, context.Canceled) {
		t.Fatalf("the large waiter: %v, want context.Canceled", err)
	}
	granted(t, small, "the small waiter once the head gave up")
}

// Shared owners hold together; an exclusive waiter waits for all of them,
// and shared requests after it wait for it (readers do not starve a
// writer).
func TestSharedAndExclusive(t *testing.T) {
	ctx := context.Background()
	var m Mutex
	r1, r2 := NewOwner(), NewOwner()
	for _, r := range []Owner{r1, r2} {
		if how, err := m.Lock(ctx, nil, nil, Request{Mode: Shared}, r); how != Fresh || err != nil {
			t.Fatalf("shared Lock = %v, %v", how, err)
		}
	}
	w, wDone := lockIn(ctx, &m, Request{})
	waitWaiters(t, &m, 1)
	_, r3 := lockIn(ctx, &m, Request{Mode: Shared})
	waitWaiters(t, &m, 2)
	m.Unlock(r1)
	pending(t, wDone, "the exclusive waiter while a shared owner holds")
	m.Unlock(r2)
	granted(t, wDone, "the exclusive waiter")
	pending(t, r3, "a shared waiter behind the exclusive one")
	if m.Owner() != w {
		t.Fatalf("Owner = %d, want the exclusive owner %d", m.Owner(), w)
	}
	m.Unlock(w)
	granted(t, r3, "the shared waiter")
}

// A request that can never fit is refused at once.
func TestTooHeavy(t *testing.T) {
	m := NewWeighted(2)
	for _, req := range []Request{weighted(3), weighted(0), weighted(-1)} {
		if _, err := m.Lock(context.Background(), nil, nil, req, NewOwner()); !errors.Is(err, ErrTooHeavy) {
			t.Errorf("Lock(%+v) = %v, want ErrTooHeavy", req, err)
		}
		if ok, _, err := m.TryLock(req, NewOwner()); ok || !errors.Is(err, ErrTooHeavy) {
			t.Errorf("TryLock(%+v) = %v, %v; want ErrTooHeavy", req, ok, err)
		}
	}
	if m.Busy() {
		t.Fatal("a refused request left the mutex busy")
	}
}

// HandOff passes an owner's part only if the head of the queue then fits;
// RevokeOwner takes one owner's part among several.
func TestWeightedHandOffAndRevoke(t *testing.T) {
	ctx := context.Background()
	m := NewWeighted(2)
	a, b := NewOwner(), NewOwner()
	m.Lock(ctx, nil, nil, weighted(1), a)
	m.Lock(ctx, nil, nil, weighted(1), b)
	_, big := lockIn(ctx, m, weighted(2))
	waitWaiters(t, m, 1)
	if ok, err := m.HandOff(a); ok || err != nil {
		t.Fatalf("HandOff(a) = %v, %v; the waiter needs b's part too", ok, err)
	}
	if !m.RevokeOwner(a, func() bool { return true }) || !m.Revoked(a) || m.Depth(b) != 1 {
		t.Fatal("RevokeOwner(a) did not take a's part alone")
	}
	if ok, err := m.HandOff(b); !ok || err != nil {
		t.Fatalf("HandOff(b) = %v, %v; with a's part back the waiter fits", ok, err)
	}
	granted(t, big, "the waiter after both parts came back")
	if err := m.Unlock(a); !errors.Is(err, ErrRevoked) {
		t.Fatalf("Unlock(a) = %v, want ErrRevoked", err)
	}
}

// Downgrade lets the shared waiters at the head of the queue in beside
// the owner, and holds the exclusive one behind them back.
func TestDowngrade(t *testing.T) {
	var m Mutex
	w, r1, r2, x := NewOwner(), NewOwner(), NewOwner(), NewOwner()
	if _, err := m.Lock(context.Background(), nil, nil, Request{}, w); err != nil {
		t.Fatal(err)
	}
	got := make(chan Owner, 3)
	for i, o := range []Owner{r1, r2} {
		go func() {
			if _, err := m.Lock(context.Background(), nil, nil, Request{Mode: Shared}, o); err == nil {
				got <- o
			}
		}()
		waitWaiters(t, &m, i+1) // queued in this order
	}
	go func() {
		if _, err := m.Lock(context.Background(), nil, nil, Request{}, x); err == nil {
			got <- x
		}
	}()
	waitWaiters(t, &m, 3)
	if err := m.Downgrade(NewOwner()); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Downgrade of a stranger: %v", err)
	}
	if err := m.Downgrade(w); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case o := <-got:
			if o == x {
				t.Fatal("the exclusive waiter got in beside a shared owner")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the shared waiters did not get in beside the downgraded owner")
		}
	}
	if m.Waiters() != 1 {
		t.Fatalf("%d waiters, want the exclusive one", m.Waiters())
	}
	for _, o := range []Owner{w, r1, r2} {
		if err := m.Unlock(o); err != nil {
			t.Fatal(err)
		}
	}
	if o := <-got; o != x {
		t.Fatalf("got %v", o)
	}
}

// Many shared owners (more than are scanned, so they are indexed): each
// is found, re-enters, and unlocks in any order, and the mutex is free
// after the last, for an exclusive owner.
func TestManySharedOwners(t *testing.T) {
	var m Mutex
	owners := make([]Owner, 3*indexFrom)
	for i := range owners {
		owners[i] = NewOwner()
		if ok, _, err := m.TryLock(Request{Mode: Shared}, owners[i]); !ok || err != nil {
			t.Fatalf("shared owner %d: %v %v", i, ok, err)
		}
	}
	for _, i := range []int{5, len(owners) - 1, 0, 2 * indexFrom} {
		if _, re, _ := m.TryLock(Request{Mode: Shared}, owners[i]); !re || m.Depth(owners[i]) != 2 {
			t.Fatalf("owner %d did not re-enter: depth %d", i, m.Depth(owners[i]))
		}
		if err := m.Unlock(owners[i]); err != nil {
			t.Fatal(err)
		}
	}
	for k, i := range rand.Perm(len(owners)) {
		if err := m.Unlock(owners[i]); err != nil {
			t.Fatalf("unlock %d (owner %d): %v", k, i, err)
		}
		if err := m.Unlock(owners[i]); !errors.Is(err, ErrNotOwner) {
			t.Fatalf("a second unlock of owner %d: %v", i, err)
		}
		for _, j := range rand.Perm(len(owners))[:4] {
			if got := m.Depth(owners[j]); got != 0 && got != 1 {
				t.Fatalf("owner %d: depth %d", j, got)
			}
		}
	}
	if ok, _, _ := m.TryLock(Request{}, NewOwner()); !ok {
		t.Fatal("not free after the last shared owner")
	}
}
