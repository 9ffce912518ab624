package registry_test

import (
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// The wait marker queues registries: a free lock is reserved for the
// PubSubLock registry that has waited longest, and another registry's try
// is refused, even though the key is free, until that one has it. So the
// registry whose subscriber the server notifies first does not win every
// race (bench scenario 3: takeover p99 from about 20 ms to under 10).
func TestWaitQueueOrder(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		opts := []registry.Option{registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10 * time.Second)}
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		var ls [3]*registry.RedisLock
		for i := range ls {
			ls[i] = obtain(t, newRegPrefix(t, b.pool(t), pfx, opts...), "k")
			mustIs(t, ls[i].TryLockContext(bg(t)), registry.ErrNotObtained) // queued, in this order
		}
		mustNil(t, holder.UnlockContext(bg(t)))
		for turn := range ls {
			for _, later := range ls[turn+1:] {
				mustIs(t, later.TryLockContext(bg(t)), registry.ErrNotObtained) // refused: not its turn
			}
			mustNil(t, ls[turn].TryLockContext(bg(t)))
			mustNil(t, ls[turn].UnlockContext(bg(t)))
		}
		if n := b.do(t, "EXISTS", "{"+holder.Key()+"}:wait").(int64); n != 0 {
			t.Fatal("the wait marker outlived the queue")
		}
	})
}

// A registry that stops trying loses its turn once its entry lapses (twice
// the poll interval after its last try); a SpinLock registry (a poller)
// queues but reserves nothing.
func TestWaitQueueLapse(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		idle := 50 * time.Millisecond
		holder := obtain(t, newRegPrefix(t, b.pool(t), pfx), "k")
		mustNil(t, holder.LockContext(bg(t)))
		spin := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithIdleBetweenTries(idle)), "k")
		gone := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(idle)), "k")
		next := obtain(t, newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(idle)), "k")
		mustIs(t, spin.TryLockContext(bg(t)), registry.ErrNotObtained)
		mustIs(t, gone.TryLockContext(bg(t)), registry.ErrNotObtained)
		left := time.Now()
		mustIs(t, next.TryLockContext(bg(t)), registry.ErrNotObtained)
		mustNil(t, holder.UnlockContext(bg(t)))
		mustIs(t, spin.TryLockContext(bg(t)), registry.ErrNotObtained) // queued first, but a poller
		var got time.Duration
		waitFor(t, 5*time.Second, "the next registry's turn", func() bool {
			if next.TryLockContext(bg(t)) != nil {
				return false
			}
			got = time.Since(left)
			return true
		})
		if got < 2*idle-20*time.Millisecond {
			t.Fatalf("the next registry got the lock %v after the gone one's last try, before its entry lapsed (%v)", got, 2*idle)
		}
		mustNil(t, next.UnlockContext(bg(t)))
		mustNil(t, spin.TryLockContext(bg(t))) // only pollers wait now: no reservation
		mustNil(t, spin.UnlockContext(bg(t)))
	})
}
