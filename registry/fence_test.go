package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockyard/lockyard/registry"
)

// lockToken takes l, returns its fencing token and releases it.
func lockToken(t *testing.T, l *registry.RedisLock) int64 {
	t.Helper()
	mustNil(t, l.LockContext(bg(t)))
	tok := l.Token()
	mustNil(t, l.UnlockContext(bg(t)))
	return tok
}

// Fencing tokens keep increasing when Redis loses the fence counter: a new
// counter starts at the server's clock in microseconds, above every token
// handed out before (FLUSHALL here; a restart without persistence below).
func TestFenceSurvivesFlushAll(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t), registry.WithFencing()), "k")
		t1 := lockToken(t, l)
		if t2 := lockToken(t, l); t2 != t1+1 {
			t.Fatalf("tokens %d then %d, want consecutive", t1, t2)
		}
		b.do(t, "FLUSHALL")
		if t3 := lockToken(t, l); t3 <= t1+1 {
			t.Fatalf("after FLUSHALL token %d, want above %d", t3, t1+1)
		}
	})
}

func TestFenceSurvivesRestartWithoutPersistence(t *testing.T) {
	s, pool := ownServer(t)
	l := obtain(t, newReg(t, pool, registry.WithFencing()), "k")
	var last int64
	for range 3 {
		last = lockToken(t, l)
	}
	mustNil(t, s.Restart())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mustNil(t, l.LockContext(ctx)) // retries the stale pooled connections
	defer l.Unlock()
	if l.Token() <= last {
		t.Fatalf("after a restart without persistence token %d, want above %d", l.Token(), last)
	}
}

// The pass script seeds a missing counter too: a local hand-off after the
// counter vanished still gives a larger token.
func TestFenceSeededByPass(t *testing.T) {
	forBackends(t, func(t *testing.T, b *backend) {
		l := obtain(t, newReg(t, b.pool(t), registry.WithFencing()), "k")
		h0 := mustHold(t, l)
		f0 := l.Token()
		b.do(t, "DEL", "{"+l.Key()+"}:fence")
		got := queue(t, l, 1, l.Token)
		mustNil(t, h0.unlock())
		if g := recvWithin(t, got, 5*time.Second, "the hand-off"); g[1].(int64) <= f0 {
			t.Fatalf("the next local holder has fencing token %v, want above %d", g[1], f0)
		}
	})
}
