package rueidislock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/lockyard/lockyard/internal/redistest"
	"github.com/lockyard/lockyard/registry"
	rueidislock "github.com/lockyard/lockyard/rueidis"
)

var prefixSeq atomic.Int64

// prefix returns a registry key unique to the test.
func prefix(t *testing.T) string {
	return fmt.Sprintf("rueidis-test.%d.%d", time.Now().UnixNano()%1e6, prefixSeq.Add(1))
}

// quiet is the registries' logger: errors only.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newRegistry returns a registry on c, closed at the end of the test.
func newRegistry(t testing.TB, c rueidis.Client, prefix string, opts ...registry.Option) *registry.Registry {
	t.Helper()
	opts = append([]registry.Option{registry.WithLogger(quiet)}, opts...)
	r, err := registry.NewWithClient(rueidislock.NewClient(c), prefix, opts...)
	if err != nil {
		t.Fatalf("NewWithClient: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// singleOptions are the options the package doc recommends for one node.
func singleOptions(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true,
		Dialer: net.Dialer{Timeout: time.Second}}
}

// newClient returns a rueidis client for opt, closed at the end of tb.
func newClient(tb testing.TB, opt rueidis.ClientOption) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// newSingle returns a rueidis client of the single-node server.
func newSingle(tb testing.TB) rueidis.Client { return newClient(tb, singleOptions(single.Addr)) }

// exists reports whether key exists (through c: in Cluster, on its node).
func exists(c rueidis.Client, key string) bool {
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	return err == nil && n == 1
}

// mustNil, mustIs and ctxFor are the shared test helpers of redistest.
var (
	mustNil = redistest.MustNil
	mustIs  = redistest.MustIs
	ctxFor  = redistest.CtxFor
)

// waitFor is redistest.WaitFor: a deadline poll.
var waitFor = redistest.WaitFor

// intervals records, per key, when each hold began and ended, to count
// overlapping holds (double grants).
type intervals struct {
	mu   sync.Mutex
	held map[string][][2]time.Time
}

func (iv *intervals) add(key string, from, to time.Time) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.held == nil {
		iv.held = make(map[string][][2]time.Time)
	}
	iv.held[key] = append(iv.held[key], [2]time.Time{from, to})
}

// overlaps counts pairs of holds of one key that overlap in time.
func (iv *intervals) overlaps() int {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	n := 0
	for _, list := range iv.held {
		sort.Slice(list, func(i, j int) bool { return list[i][0].Before(list[j][0]) })
		end := time.Time{}
		for _, x := range list {
			if x[0].Before(end) {
				n++
			}
			if x[1].After(end) {
				end = x[1]
			}
		}
	}
	return n
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// load runs goroutines that repeat a step until halted.
type load struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// startLoad starts n goroutines, each calling step(g) until halt, at most
// 1e6 times (every load loop is bounded). The test's cleanup halts it too.
func startLoad(t testing.TB, n int, step func(g int)) *load {
	l := &load{stop: make(chan struct{})}
	for g := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for range 1_000_000 {
				select {
				case <-l.stop:
					return
				default:
				}
				step(g)
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

// halt stops the goroutines and waits for them; it may be called twice.
func (l *load) halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}
