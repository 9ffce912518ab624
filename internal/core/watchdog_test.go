package core

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

func (f *fakeRenewer) Renew(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}

func (f *fakeRenewer) RenewBatch(_ context.Context, calls []RenewCall) []RenewReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]RenewReply, len(calls))
	for i, c := range calls {
		f.keys = append(f.keys, c.Key)
		out[i].OK = true
	}
	return out
}

// nobody is a holder that is never told of a loss in this test.
type nobody struct{}

func (nobody) HoldLost(*Hold)   {}
func (nobody) KindName() string { return "nobody" }

// The watchdog renews the holds of every kind, each through its own
// renewer, in one batch per kind; a released hold is left out.
func TestWatchdogRenewsEachKind(t *testing.T) {
	c := &Core{Epoch: time.Now(), Counters: NewCounters(), BG: NewGroup(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.Watchdog = NewWatchdog(c, true)
	defer c.BG.Close()
	a, b := &fakeRenewer{}, &fakeRenewer{}
	newIn := func(key string, kind *fakeRenewer) *Hold {
		return NewHold(c, key, "t", 0, time.Minute, c.Now()+int64(time.Minute), nobody{}, kind)
	}
	done := newIn("a-released", a)
	done.Retire()
	c.Watchdog.Renew([]*Hold{newIn("a1", a), newIn("b1", b), newIn("a2", a), done, newIn("b2", b)})
	if !slices.Equal(a.keys, []string{"a1", "a2"}) || !slices.Equal(b.keys, []string{"b1", "b2"}) {
		t.Fatalf("renewed: kind a %v, kind b %v; want [a1 a2] and [b1 b2]", a.keys, b.keys)
	}
	if n := c.Counters.Renewals.Load(); n != 4 {
		t.Fatalf("%d renewals counted, want 4", n)
	}
}
