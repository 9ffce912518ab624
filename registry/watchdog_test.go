package registry

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeRenewer records the keys it was asked to renew, and renews them.
type fakeRenewer struct {
	mu   sync.Mutex
	keys []string
}

func (f *fakeRenewer) renew(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}

func (f *fakeRenewer) renewBatch(_ context.Context, calls []renewCall) []renewReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]renewReply, len(calls))
	for i, c := range calls {
		f.keys = append(f.keys, c.lk)
		out[i].ok = true
	}
	return out
}

// nobody is a holder that is never told of a loss in this test.
type nobody struct{}

func (nobody) holdLost(*hold) {}

// The watchdog renews the holds of every kind, each through its own
// renewer, in one batch per kind; a released hold is left out.
func TestWatchdogRenewsEachKind(t *testing.T) {
	c := &core{epoch: time.Now(), stats: newStats(), bg: newGroup(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.watchdog = newWatchdog(c, true)
	defer c.bg.close()
	a, b := &fakeRenewer{}, &fakeRenewer{}
	newIn := func(key string, kind *fakeRenewer) *hold {
		return newHold(c, key, "t", 0, time.Minute, c.now()+int64(time.Minute), nobody{}, kind)
	}
	done := newIn("a-released", a)
	done.retire()
	c.watchdog.renew([]*hold{newIn("a1", a), newIn("b1", b), newIn("a2", a), done, newIn("b2", b)})
	if !slices.Equal(a.keys, []string{"a1", "a2"}) || !slices.Equal(b.keys, []string{"b1", "b2"}) {
		t.Fatalf("renewed: kind a %v, kind b %v; want [a1 a2] and [b1 b2]", a.keys, b.keys)
	}
	if n := c.stats.renewals.Load(); n != 4 {
		t.Fatalf("%d renewals counted, want 4", n)
	}
}
