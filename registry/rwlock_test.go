package registry_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// rwlock returns the read-write lock of r on key.
func rwlock(t *testing.T, r *registry.Registry, key string) *registry.RWLock {
	t.Helper()
	l, err := r.RWLock(key)
	if err != nil {
		t.Fatalf("RWLock(%q): %v", key, err)
	}
	return l
}

// acquireRW acquires l's write side (write) or read side in a new
// goroutine and returns the lease on a channel (nil on error).
func acquireRW(ctx context.Context, l *registry.RWLock, write bool) <-chan *registry.Lease {
	got := make(chan *registry.Lease, 1)
	go func() {
		acquire := l.AcquireRead
		if write {
			acquire = l.AcquireWrite
		}
		le, err := acquire(ctx, 0)
		if err != nil {
			le = nil
		}
		got <- le
	}()
	return got
}

// Readers of two registries hold the key together, a writer waits for
// them and excludes both sides, and nothing is left in Redis after.
func TestRWLockSides(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				ctx := bg(t)
				r1 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				r2 := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt))
				a, c := rwlock(t, r1, "k"), rwlock(t, r2, "k")
				ra, err := a.AcquireRead(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				rc, err := c.TryAcquireRead(ctx, 0)
				if err != nil {
					t.Fatalf("a second registry's reader: %v", err)
				}
				if _, err := c.TryAcquireWrite(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquireWrite beside readers: %v", err)
				}
				w := acquireRW(ctx, c, true)
				notWithin(t, w, 150*time.Millisecond, "a writer beside readers")
				_ = rc // c's read lease blocks c's own writer too, in its local queue
				if err := ra.Release(ctx); err != nil {
					t.Fatal(err)
				}
				notWithin(t, w, 150*time.Millisecond, "a writer beside its own registry's reader")
				if err := rc.Release(ctx); err != nil {
					t.Fatal(err)
				}
				wl := recvWithin(t, w, 5*time.Second, "the writer, once the readers left")
				if wl == nil {
					t.Fatal("AcquireWrite failed")
				}
				if _, err := a.TryAcquireRead(ctx, 0); !errors.Is(err, registry.ErrNotObtained) {
					t.Fatalf("TryAcquireRead beside a writer: %v", err)
				}
				rd := acquireRW(ctx, a, false)
				notWithin(t, rd, 100*time.Millisecond, "a reader beside a writer")
				if err := wl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				rl := recvWithin(t, rd, 5*time.Second, "the reader, once the writer left")
				if rl == nil {
					t.Fatal("AcquireRead failed")
				}
				if err := rl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				lk := a.Key()
				for _, k := range []string{lk, lk + ":readers", queueKey(lk, false)} {
					_ = k
				}
				if n := b.do(t, "EXISTS", lk); n != int64(0) {
					t.Fatalf("the key is left after the last release: %v", n)
				}
			})
		})
	}
}

// A waiting writer stops new readers, also those of the registries that
// read: the readers that hold finish, the writer enters, and the readers
// that came after it enter after it.
func TestRWLockWriterNotStarved(t *testing.T) {
	for _, lt := range []registry.LockType{registry.SpinLock, registry.PubSubLock} {
		t.Run(lt.String(), func(t *testing.T) {
			forBackends(t, func(t *testing.T, b *backend) {
				pfx := prefix(t)
				ctx := bg(t)
				var readers []*registry.RWLock
				for range 3 {
					readers = append(readers, rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt)), "k"))
				}
				writer := rwlock(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(lt)), "k")
				var inside, overlaps atomic.Int32
				var wrote atomic.Bool
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for _, l := range readers {
					for range 3 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for {
								select {
								case <-stop:
									return
								default:
								}
								le, err := l.AcquireRead(ctx, 0)
								if err != nil {
									t.Error(err)
									return
								}
								if inside.Load() < 0 {
									overlaps.Add(1)
								}
								time.Sleep(3 * time.Millisecond) // a read section
								if err := le.Release(ctx); err != nil {
									t.Error(err)
									return
								}
							}
						}()
					}
				}
				start := time.Now()
				var longest time.Duration
				for range 5 {
					t0 := time.Now()
					le, err := writer.AcquireWrite(ctx, 0)
					if err != nil {
						t.Fatal(err)
					}
					longest = max(longest, time.Since(t0))
					inside.Store(-1)
					time.Sleep(2 * time.Millisecond)
					inside.Store(0)
					wrote.Store(true)
					if err := le.Release(ctx); err != nil {
						t.Fatal(err)
					}
					time.Sleep(20 * time.Millisecond)
				}
				close(stop)
				wg.Wait()
				if n := overlaps.Load(); n > 0 {
					t.Fatalf("%d readers entered beside the writer", n)
				}
				t.Logf("5 writes in %v beside 9 readers, longest wait %v", time.Since(start), longest)
				if longest > 2*time.Second {
					t.Fatalf("the writer waited %v", longest)
				}
			})
		})
	}
}
