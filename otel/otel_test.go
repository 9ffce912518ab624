package lockyardotel_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/lockyard/lockyard/internal/testkit/redistest"
	lockyardotel "github.com/lockyard/lockyard/otel"
	"github.com/lockyard/lockyard/registry"
)

var real *redistest.Server

func TestMain(m *testing.M) {
	var err error
	if real, err = redistest.Start(); err != nil {
		println("redis-server:", err.Error())
		os.Exit(1)
	}
	code := m.Run()
	real.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goleak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// forBackends runs fn on miniredis and on a real redis-server.
func forBackends(t *testing.T, fn func(t *testing.T, addr string)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, miniredis.RunT(t).Addr()) })
	t.Run("redis", func(t *testing.T) { fn(t, real.Addr) })
}

// A wait and a hold become spans with the key and fence as attributes, and
// histograms with the kind only; the counters and gauges of Stats are read
// at collection.
func TestObserverAndMetrics(t *testing.T) {
	forBackends(t, func(t *testing.T, addr string) {
		ctx := context.Background()
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) })

		pool := redistest.NewPool(addr)
		t.Cleanup(func() { pool.Close() })
		obs := lockyardotel.NewObserver(lockyardotel.WithTracerProvider(tp), lockyardotel.WithMeterProvider(mp))
		reg, err := registry.New(pool, "otel-"+t.Name(), registry.WithFencing(), registry.WithObserver(obs))
		redistest.MustNil(t, err)
		t.Cleanup(func() { reg.Close() })
		other, err := registry.New(pool, "otel-"+t.Name())
		redistest.MustNil(t, err)
		t.Cleanup(func() { other.Close() })
		unreg, err := lockyardotel.RegisterMetrics(reg, lockyardotel.WithMeterProvider(mp))
		redistest.MustNil(t, err)
		t.Cleanup(func() { _ = unreg.Unregister() })

		held, err := other.Acquire(ctx, "report", 0)
		redistest.MustNil(t, err)
		got := make(chan *registry.Lease, 1)
		go func() {
			le, _ := reg.Acquire(ctx, "report", 0)
			got <- le
		}()
		redistest.WaitFor(t, 5*time.Second, "the waiter", func() bool { return reg.Stats().Waiting == 1 })
		redistest.MustNil(t, held.Release(ctx))
		le := <-got
		if le == nil {
			t.Fatal("the waiter did not acquire")
		}
		redistest.MustNil(t, le.Release(ctx))

		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans.GetSpans().Snapshots() {
			byName[s.Name()] = s
		}
		for _, name := range []string{"lockyard.wait", "lockyard.hold"} {
			s, ok := byName[name]
			if !ok {
				t.Fatalf("no span %s among %v", name, byName)
			}
			attrs := map[string]string{}
			for _, kv := range s.Attributes() {
				attrs[string(kv.Key)] = kv.Value.String()
			}
			if attrs["lockyard.key"] != le.Key() || attrs["lockyard.kind"] != "lock" || attrs["lockyard.fence"] == "" || !s.EndTime().After(s.StartTime()) {
				t.Errorf("span %s: %v from %v to %v", name, attrs, s.StartTime(), s.EndTime())
			}
		}

		var rm metricdata.ResourceMetrics
		redistest.MustNil(t, reader.Collect(ctx, &rm))
		seen := map[string]bool{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				seen[m.Name] = true
				switch d := m.Data.(type) {
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						if _, ok := p.Attributes.Value("lockyard.key"); ok || p.Count != 1 {
							t.Errorf("%s: a point %v with count %d; want one, with no key", m.Name, p.Attributes, p.Count)
						}
					}
				case metricdata.Sum[int64]:
					if m.Name == "lockyard.acquisitions" && (len(d.DataPoints) != 1 || d.DataPoints[0].Value != 1) {
						t.Errorf("lockyard.acquisitions = %+v, want 1", d.DataPoints)
					}
				}
			}
		}
		for _, name := range []string{"lockyard.wait.duration", "lockyard.hold.duration", "lockyard.acquisitions", "lockyard.held", "lockyard.waiting", "lockyard.gave_up"} {
			if !seen[name] {
				t.Errorf("metric %s not collected (got %v)", name, seen)
			}
		}
	})
}
