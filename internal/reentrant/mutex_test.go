package reentrant

import (
	"context"
	"errors"
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
	if how, err := m.Lock(context.Background(), nil, nil, 0, Self()); how != Fresh || err != nil {
		t.Fatalf("first Lock = %v, %v", how, err)
	}
	if how, err := m.Lock(context.Background(), nil, nil, 0, Self()); how != Reentered || err != nil || m.Depth(Self()) != 2 {
		t.Fatal("owner could not re-enter")
	}
	if ok, re := m.TryLock(Self()); !ok || !re || m.Depth(Self()) != 3 {
		t.Fatal("owner's TryLock did not re-enter")
	}
	if run(func() bool { ok, _ := m.TryLock(Self()); return ok }) {
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
	m.Lock(context.Background(), nil, nil, 0, Self())
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
			m.Lock(context.Background(), nil, nil, 0, Self())
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
	m.Lock(context.Background(), nil, nil, 0, Self())
	got := make(chan How)
	go func() {
		how, err := m.Lock(context.Background(), nil, nil, 0, Self())
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
	m.Lock(context.Background(), nil, nil, 0, Self())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := m.Lock(ctx, nil, nil, 0, Self()); done <- err }()
	waitWaiters(t, &m, 1)
	abort := make(chan struct{})
	aborted := make(chan error)
	go func() { _, err := m.Lock(context.Background(), abort, nil, 0, Self()); aborted <- err }()
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
		m.Lock(context.Background(), nil, nil, 0, Self())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := m.Lock(ctx, nil, nil, 0, Self())
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
	m.Lock(context.Background(), nil, nil, 0, Self())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.Lock(ctx, nil, nil, 0, Self())
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
	m.Lock(ctx, nil, nil, 0, Self())
	if ok, err := m.HandOff(Self()); ok || err != nil {
		t.Fatalf("HandOff without waiters = %v, %v; want false, nil", ok, err)
	}
	if m.Depth(Self()) != 1 {
		t.Fatal("HandOff without waiters gave up ownership")
	}
	got := make(chan int)
	go func() {
		m.Lock(ctx, nil, nil, 0, Self())
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
		m.Lock(ctx, nil, nil, 0, Self())
		m.Lock(ctx, nil, nil, 0, Self()) // two holds
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
		}), 0, Self())
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
	m.Lock(context.Background(), nil, nil, 0, Self())
	if last, err := m.Leave(Self()); !last || err != nil {
		t.Fatalf("Leave = %v, %v", last, err)
	}
	if m.Revoke(func() bool { return true }) {
		t.Fatal("Revoke took the mutex from an owner finishing its last hold")
	}
	if err := m.Unlock(Self()); err != nil {
		t.Fatal(err)
	}
	m.Lock(context.Background(), nil, nil, 0, Self())
	if !m.Revoke(func() bool { return true }) || m.Busy() {
		t.Fatal("Revoke after a new Lock did not free the mutex")
	}
}

// observer is a func as an Observer.
type observer func()

func (o observer) Queued() { o() }

// NextTag is the tag of the goroutine that HandOff would hand the mutex to.
func TestNextTag(t *testing.T) {
	var m Mutex
	ctx := context.Background()
	m.Lock(ctx, nil, nil, 0, Self())
	if _, ok := m.NextTag(); ok {
		t.Fatal("NextTag without waiters reported one")
	}
	first, cancel := context.WithCancel(ctx)
	gave, got := make(chan error, 1), make(chan int64, 1)
	go func() { _, err := m.Lock(first, nil, nil, 5, Self()); gave <- err }()
	waitWaiters(t, &m, 1)
	go func() {
		m.Lock(ctx, nil, nil, 7, Self())
		got <- 7
		m.Unlock(Self())
	}()
	waitWaiters(t, &m, 2)
	if tag, ok := m.NextTag(); !ok || tag != 5 {
		t.Fatalf("NextTag = %d, %v; want 5, the head of the queue", tag, ok)
	}
	cancel()
	if err := <-gave; err == nil {
		t.Fatal("the cancelled waiter got the mutex")
	}
	if tag, ok := m.NextTag(); !ok || tag != 7 {
		t.Fatalf("NextTag after the head left = %d, %v; want 7", tag, ok)
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
	if how, err := m.Lock(ctx, nil, nil, 0, a); how != Fresh || err != nil {
		t.Fatalf("Lock(a) = %v, %v", how, err)
	}
	if o := m.Owner(); o != a {
		t.Fatalf("Owner %d, want token a %d", o, a)
	}
	if ok, _ := m.TryLock(Self()); ok {
		t.Fatal("a goroutine's TryLock succeeded while token a holds the mutex")
	}
	if ok, _ := m.TryLock(b); ok {
		t.Fatal("token b's TryLock succeeded while token a holds the mutex")
	}
	got := make(chan How, 1)
	go func() { how, _ := m.Lock(ctx, nil, nil, 0, b); got <- how }()
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
