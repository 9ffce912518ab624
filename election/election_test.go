package election_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/election"
	"github.com/lockyard/lockyard/internal/testkit/redistest"
	"github.com/lockyard/lockyard/registry"
)

var real *redistest.Server

func TestMain(m *testing.M) {
	var err error
	if real, err = redistest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: real-Redis tier:", err) // never skipped
		os.Exit(1)
	}
	code := m.Run()
	real.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// forBackends runs fn on miniredis and on the real server, with the
// address and a prefix of its own.
func forBackends(t *testing.T, fn func(t *testing.T, addr, prefix string)) {
	var seq atomic.Int64
	for _, name := range []string{"miniredis", "redis"} {
		t.Run(name, func(t *testing.T) {
			addr := real.Addr
			if name == "miniredis" {
				addr = miniredis.RunT(t).Addr()
			}
			fn(t, addr, fmt.Sprintf("election-test.%s.%s.%d", t.Name(), name, seq.Add(1)))
		})
	}
}

// replica returns a registry of its own, as another process would have.
func replica(t *testing.T, addr, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	pool := redistest.NewPool(addr)
	opts = append([]registry.Option{registry.WithAutoRenew(), registry.WithFencing(), registry.WithLockType(registry.PubSubLock)}, opts...)
	r, err := registry.New(pool, prefix, opts...)
	redistest.MustNil(t, err)
	t.Cleanup(func() { r.Close(); pool.Close() })
	return r
}

// Three replicas run the election: one leads at a time, leadership moves
// when a leader's term ends, and fencing tokens rise with each term.
func TestOneLeaderAtATime(t *testing.T) {
	forBackends(t, func(t *testing.T, addr, prefix string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var (
			leading, overlaps, terms atomic.Int64
			mu                       sync.Mutex
			last                     int64
			byReplica                = map[int]int{}
			errs                     = make(chan error, 3)
		)
		for i := range 3 {
			e, err := election.New(replica(t, addr, prefix), "leader", 0)
			redistest.MustNil(t, err)
			go func() {
				errs <- e.Run(ctx, func(lctx context.Context, le *registry.Lease) error {
					if leading.Add(1) != 1 {
						overlaps.Add(1)
					}
					defer leading.Add(-1)
					if e.Leading() != le {
						return errors.New("Leading is not the term's lease")
					}
					mu.Lock()
					if le.Token() <= last {
						mu.Unlock()
						return fmt.Errorf("token %d after %d", le.Token(), last)
					}
					last = le.Token()
					byReplica[i]++
					mu.Unlock()
					if terms.Add(1) >= 30 {
						cancel()
					}
					return nil // the term ends: resign and campaign again
				})
			}()
		}
		for range 3 {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled", err)
			}
		}
		if overlaps.Load() != 0 {
			t.Fatalf("%d terms overlapped another", overlaps.Load())
		}
		if len(byReplica) < 2 {
			t.Fatalf("leadership never moved: terms by replica %v", byReplica)
		}
	})
}

// When the leader's lease is lost (its key is deleted behind its back), the
// context of lead ends with cause ErrLockLost, Leading turns nil, and Run
// campaigns again.
func TestLossEndsTheTerm(t *testing.T) {
	forBackends(t, func(t *testing.T, addr, prefix string) {
		const ttl = 150 * time.Millisecond
		e, err := election.New(replica(t, addr, prefix), "leader", ttl)
		redistest.MustNil(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		causes := make(chan error, 2)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(lctx context.Context, le *registry.Lease) error {
				first := len(causes) == 0
				if !first {
					cancel() // the second term: done
				} else if _, err := redistest.Do(addr, "DEL", le.Key()); err != nil {
					return err
				}
				<-lctx.Done()
				if first && e.Leading() != nil {
					return errors.New("Leading is not nil after the loss")
				}
				causes <- context.Cause(lctx)
				return errors.New("lead's error after a loss is not Run's")
			})
		}()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		if c := <-causes; !errors.Is(c, registry.ErrLockLost) {
			t.Fatalf("the first term ended with %v, want ErrLockLost", c)
		}
	})
}

// Close ends a leader's term and its Run with ErrClosed; New refuses bad
// input.
func TestCloseAndBadInput(t *testing.T) {
	forBackends(t, func(t *testing.T, addr, prefix string) {
		r := replica(t, addr, prefix)
		e, err := election.New(r, "leader", 0)
		redistest.MustNil(t, err)
		won := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- e.Run(context.Background(), func(lctx context.Context, le *registry.Lease) error {
				close(won)
				<-lctx.Done()
				return nil
			})
		}()
		<-won
		redistest.MustNil(t, r.Close())
		select {
		case err := <-done:
			redistest.MustIs(t, err, registry.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after Close")
		}

		plainPool := redistest.NewPool(addr)
		defer plainPool.Close()
		plain, err := registry.New(plainPool, prefix+"-plain")
		redistest.MustNil(t, err)
		defer plain.Close()
		for _, c := range []struct {
			reg  *registry.Registry
			key  string
			ttl  time.Duration
			want error
		}{
			{nil, "k", 0, registry.ErrInvalidConfig},
			{plain, "k", 0, registry.ErrInvalidConfig},
			{replica(t, addr, prefix), "k", time.Millisecond, registry.ErrInvalidConfig},
			{replica(t, addr, prefix), "", 0, registry.ErrInvalidKey},
		} {
			_, err := election.New(c.reg, c.key, c.ttl)
			redistest.MustIs(t, err, c.want)
		}
	})
}

// Resign during Run ends the term's context (cause ErrResigned) before the
// lease is released, so that lead stops before another replica leads.
func TestResignEndsTheTerm(t *testing.T) {
	forBackends(t, func(t *testing.T, addr, prefix string) {
		e, err := election.New(replica(t, addr, prefix), "leader", 0)
		redistest.MustNil(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		causes := make(chan error, 1)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, func(lctx context.Context, le *registry.Lease) error {
				if len(causes) == 0 {
					go e.Resign(context.Background())
				}
				<-lctx.Done()
				select {
				case causes <- context.Cause(lctx):
				default:
				}
				cancel()
				return errors.New("explained by the resignation")
			})
		}()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		redistest.MustIs(t, <-causes, election.ErrResigned)
	})
}

// Any replica reads who leads: the leader's registry and label, and false
// once it resigned.
func TestLeader(t *testing.T) {
	forBackends(t, func(t *testing.T, addr, prefix string) {
		ctx := context.Background()
		a, err := election.New(replica(t, addr, prefix, registry.WithLabel("replica-a")), "leader", 0)
		redistest.MustNil(t, err)
		b, err := election.New(replica(t, addr, prefix, registry.WithLabel("replica-b")), "leader", 0)
		redistest.MustNil(t, err)
		if _, ok, err := b.Leader(ctx); ok || err != nil {
			t.Fatalf("before any campaign: Leader = %v, %v; want none", ok, err)
		}
		_, err = a.Campaign(ctx)
		redistest.MustNil(t, err)
		for _, e := range []*election.Election{a, b} {
			h, ok, err := e.Leader(ctx)
			if !ok || err != nil || h.Label != "replica-a" || h.TTL <= 0 || !strings.HasPrefix(h.Token, h.Registry+":") {
				t.Errorf("Leader = %+v, %v, %v; want replica-a", h, ok, err)
			}
		}
		redistest.MustNil(t, a.Resign(ctx))
		if h, ok, err := b.Leader(ctx); ok || err != nil {
			t.Errorf("after the resignation: Leader = %+v, %v, %v; want none", h, ok, err)
		}
	})
}
