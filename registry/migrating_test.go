package registry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

// migrating answers TRYAGAIN to every script on more than one key while
// armed, as a Cluster node does while the keys' slot migrates (the test of
// a real migration is clienttest.ClusterReleaseMidMigration).
type migrating struct {
	registry.Client
	armed atomic.Bool
}

func (c *migrating) Eval(ctx context.Context, s *registry.Script, keys []string, args []any) (any, error) {
	if len(keys) > 1 && c.armed.Load() {
		return nil, &registry.ReplyError{Err: errors.New("TRYAGAIN Multiple keys request during rehashing of slot")}
	}
	return c.Client.Eval(ctx, s, keys, args)
}

// While every script on several keys is refused, a release gives back the
// key alone: the lock key is deleted, and a listener of another registry
// is woken by the release message, not at its poll; a permit is given back.
// The key alone is compared as every release compares it: another holder's
// key or permit is left alone, and the release reports the loss.
func TestReleaseWhileSlotMigrates(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		t.Run("lock", func(t *testing.T) {
			pfx := prefix(t)
			c := &migrating{Client: registry.NewPoolClient(b.pool(t))}
			r := newRegClientPrefix(t, c, pfx)
			other := newRegPrefix(t, b.pool(t), pfx, registry.WithLockType(registry.PubSubLock), registry.WithIdleBetweenTries(10*time.Second))
			l, err := r.Obtain("k")
			mustNil(t, err)
			mustNil(t, l.LockContext(bg(t)))
			ol, err := other.Obtain("k")
			mustNil(t, err)
			got, at := make(chan error, 1), make(chan time.Time, 1)
			go func() {
				err := ol.LockContext(bg(t))
				at <- time.Now()
				if err == nil {
					err = ol.UnlockContext(bg(t))
				}
				got <- err
			}()
			redistest.WaitFor(t, 5*time.Second, "the waiter in the queue", func() bool {
				n, _ := redis.Int(b.do(t, "EXISTS", queueKey(l.Key(), false)), nil)
				return n == 1
			})
			c.armed.Store(true)
			since := time.Now()
			mustNil(t, l.UnlockContext(bg(t)))
			mustNil(t, redistest.Next(t, got, 15*time.Second, "the waiter's lock", func(error) bool { return true }))
			if d := (<-at).Sub(since); d > 5*time.Second {
				t.Fatalf("the waiter had the lock %v after the release: at its poll, not by the message", d)
			}
			// Another holder's key: left as it is.
			c.armed.Store(false)
			mustNil(t, l.LockContext(bg(t)))
			b.do(t, "SET", l.Key(), "another holder")
			c.armed.Store(true)
			if err := l.UnlockContext(bg(t)); !errors.Is(err, registry.ErrLockLost) {
				t.Fatalf("release of a key another holder has: %v, want ErrLockLost", err)
			}
			if v, _ := redis.String(b.do(t, "GET", l.Key()), nil); v != "another holder" {
				t.Fatalf("another holder's key is %q after the release", v)
			}
		})
		t.Run("semaphore", func(t *testing.T) {
			pfx := prefix(t)
			c := &migrating{Client: registry.NewPoolClient(b.pool(t))}
			s := semaphore(t, newRegClientPrefix(t, c, pfx, registry.WithFencing()), "k", 1)
			other := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 1)
			for _, theirs := range []bool{false, true} {
				c.armed.Store(false)
				le, err := s.Acquire(bg(t), 0)
				mustNil(t, err)
				if theirs { // pruned after it expired, and taken by another holder
					b.do(t, "DEL", s.Key())
					ole, err := other.TryAcquire(bg(t), 0)
					mustNil(t, err)
					defer ole.Release(bg(t))
				}
				c.armed.Store(true)
				err = le.Release(bg(t))
				switch n := zcard(t, b, s.Key()); {
				case theirs && (!errors.Is(err, registry.ErrLockLost) || n != 1):
					t.Fatalf("release of a pruned permit: %v, %d permits held, want ErrLockLost and another's 1", err, n)
				case !theirs && (err != nil || n != 0):
					t.Fatalf("release: %v, %d permits held, want nil and 0", err, n)
				}
			}
		})
	})
}
