package registry_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/lockyard/lockyard/internal/wire"
	"github.com/lockyard/lockyard/registry"
)

// semfull.lua says 1 only when at least the given count of permits is
// held and every one of them is live on the server's clock; a key that
// is missing, short of permits, holds an expired one (unpruned) or is of
// another type is left to semacquire.lua (0).
func TestSemaphoreFullScript(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		script := redis.NewScript(1, registry.SemFullSource)
		c := b.pool(t).Get()
		defer c.Close()
		now, err := redis.Int64s(c.Do("TIME"))
		mustNil(t, err)
		ms := now[0]*1000 + now[1]/1000
		for i, tc := range []struct {
			name    string
			scores  []int64 // the permits' expiries, from now
			permits int
			want    int
		}{
			{"all live", []int64{60000, 60000}, 2, 1},
			{"more live than permits", []int64{60000, 60000, 60000}, 2, 1},
			{"one expired", []int64{60000, -1000}, 2, 0},
			{"one short", []int64{60000}, 2, 0},
			{"none", nil, 2, 0},
			{"another type", nil, 2, -1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				lk := fmt.Sprintf("%s-full-%d", prefix(t), i)
				for j, d := range tc.scores {
					_, err := c.Do("ZADD", lk, ms+d, fmt.Sprintf("p%d#2", j))
					mustNil(t, err)
				}
				want := tc.want
				if want < 0 {
					_, err := c.Do("SET", lk, "a lock's token")
					mustNil(t, err)
					want = 0
				}
				got, err := redis.Int(script.Do(c, lk, tc.permits))
				mustNil(t, err)
				if got != want {
					t.Fatalf("semfull = %d, want %d", got, want)
				}
			})
		}
	})
}

// A TryAcquire whose last one found every permit held and live asks
// semfull.lua first, and is refused by it while that is still so; once a
// permit is given back, or has expired, semacquire.lua takes it; a key of
// another type is still reported by semacquire.lua. A TryAcquire admitted,
// or refused because a free permit is the turn of a waiter in line, asks
// semacquire.lua at once next time.
func TestSemaphoreTryAcquireAsksFullFirst(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		pfx := prefix(t)
		holder := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "k", 2)
		x, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		y, err := holder.Acquire(bg(t), 0)
		mustNil(t, err)
		c := &scriptNames{Client: registry.NewPoolClient(b.pool(t))}
		reg := newRegClientPrefix(t, c, pfx)
		s := semaphore(t, reg, "k", 2)
		try := func(s *registry.Semaphore, want []string, wantErr error) *registry.Lease {
			t.Helper()
			c.take()
			le, err := s.TryAcquire(bg(t), 0)
			if wantErr == nil {
				mustNil(t, err)
			} else {
				mustIs(t, err, wantErr)
			}
			if got := slices.DeleteFunc(c.take(), func(n string) bool { return n == "label" }); !slices.Equal(got, want) {
				t.Fatalf("scripts %q, want %q", got, want)
			}
			return le
		}
		try(s, []string{"semacquire"}, registry.ErrNotObtained)
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		s.AgeTryFull(600 * time.Millisecond)
		try(s, []string{"semfull"}, registry.ErrNotObtained) // a refusal by semfull.lua counts as one
		s.AgeTryFull(600 * time.Millisecond)
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		s.AgeTryFull(time.Second) // a second after: semacquire.lua again
		try(s, []string{"semacquire"}, registry.ErrNotObtained)
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		mustNil(t, x.Release(bg(t)))
		a := try(s, []string{"semfull", "semacquire"}, nil)
		try(s, []string{"semacquire"}, registry.ErrNotObtained) // the last one was admitted
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		first, err := redis.Strings(b.do(t, "ZRANGE", s.Key(), 0, 0), nil)
		mustNil(t, err)
		b.do(t, "ZADD", s.Key(), "XX", 1, first[0]) // expired, and nobody pruned it
		d := try(s, []string{"semfull", "semacquire"}, nil)
		mustNil(t, d.Release(bg(t)))
		// A permit free, and the turn of a listener of another registry in
		// line: refused by semacquire.lua, which it asks again next time.
		far := time.Now().Add(time.Hour).UnixMilli()
		b.do(t, "ZADD", wire.Layout{}.QueueKey(s.Key()), 1, "ghost/1")
		b.do(t, "HSET", wire.Layout{}.WaitersKey(s.Key()), "ghost/1", fmt.Sprintf("l %d %d", far, far))
		try(s, []string{"semacquire"}, registry.ErrNotObtained)
		try(s, []string{"semacquire"}, registry.ErrNotObtained)
		for _, le := range []*registry.Lease{y, a} { // one of them lost its permit to the expiry
			if err := le.Release(bg(t)); err != nil && !errors.Is(err, registry.ErrLockLost) {
				t.Fatal(err)
			}
		}

		// Holders of another count of permits, found by the comparison
		// due once a second, not refused as full.
		b.do(t, "DEL", wire.Layout{}.QueueKey(s.Key()))
		b.do(t, "ZADD", s.Key(), far, "p1#3", far, "p2#3", far, "p3#3")
		try(s, []string{"semacquire"}, registry.ErrNotObtained) // every permit held: semfull.lua next
		try(s, []string{"semfull"}, registry.ErrNotObtained)
		s.AgeCompared(2 * time.Second)
		try(s, []string{"semacquire"}, registry.ErrInvalidConfig)
		b.do(t, "DEL", s.Key())

		// A key that became another type's after a refusal.
		one := semaphore(t, newRegPrefix(t, b.pool(t), pfx), "one", 1)
		z, err := one.Acquire(bg(t), 0)
		mustNil(t, err)
		s1 := semaphore(t, reg, "one", 1)
		try(s1, []string{"semacquire"}, registry.ErrNotObtained)
		b.do(t, "DEL", s1.Key())
		b.do(t, "SET", s1.Key(), "a lock's token")
		try(s1, []string{"semfull", "semacquire"}, registry.ErrWrongKind)
		if err := z.Release(bg(t)); err != nil && !errors.Is(err, registry.ErrLockLost) {
			t.Fatal(err)
		}
	})
}
