// Package lockyardotel records what a lockyard registry does with
// OpenTelemetry: spans for waits and holds, and the registry's metrics
// (registry.Stats) through the OpenTelemetry metric API. It is a module of
// its own, so that the registry never downloads OpenTelemetry.
//
//	obs := lockyardotel.NewObserver(lockyardotel.WithTracerProvider(tp), lockyardotel.WithMeterProvider(mp))
//	reg, _ := registry.New(pool, "orders", registry.WithObserver(obs))
//	unreg, _ := lockyardotel.RegisterMetrics(reg, lockyardotel.WithMeterProvider(mp)) // Stats' counters and gauges
//	defer unreg.Unregister()
//
// The key of a lock is a span attribute (lockyard.key) and never a metric
// attribute: a metric labelled by key has one series per key. The
// observer's histograms carry lockyard.kind ("lock", "semaphore", "rwlock" or "multi") and
// nothing else; the instruments of RegisterMetrics carry no attribute
// (they count the whole registry, as registry.Stats does). Spans are
// recorded when the wait or hold ends, with their real start time; an
// Observer has no caller context, so they are root spans.
package lockyardotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockyard/lockyard/registry"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/lockyard/lockyard/otel"

// Attribute keys.
const (
	KeyKind  = attribute.Key("lockyard.kind")  // "lock", "semaphore", "rwlock" or "multi"
	KeyKey   = attribute.Key("lockyard.key")   // the Redis key (spans only)
	KeyFence = attribute.Key("lockyard.fence") // the fencing token (spans only)
)

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	noKeys bool
}

// Option configures NewObserver and RegisterMetrics.
type Option func(*config)

// WithTracerProvider sets the tracer provider (default otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider (default otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithoutKeys leaves the key out of spans too (keys that carry user data).
func WithoutKeys() Option { return func(c *config) { c.noKeys = true } }

func newConfig(opts []Option) config {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider()}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// observer records spans and duration histograms.
type observer struct {
	tracer     trace.Tracer
	noKeys     bool
	wait, hold metric.Float64Histogram
}

// NewObserver returns a registry.Observer (registry.WithObserver) that
// records a span lockyard.wait for every acquisition by a call that may
// wait (Lock, LockContext, Acquire, Semaphore.Acquire), one that got its
// lock at once included (its span is the time the acquisition took; none
// for TryLock and the TryAcquires), and a
// span lockyard.hold for every hold, each with lockyard.kind,
// lockyard.key and lockyard.fence; a span lockyard.lost (status Error) for
// a hold lost before its release, and lockyard.renewal_failed for a failed
// renewal; and the histograms lockyard.wait.duration and
// lockyard.hold.duration (seconds), with lockyard.kind only. An instrument
// that the meter refuses is left out.
func NewObserver(opts ...Option) registry.Observer {
	c := newConfig(opts)
	m := c.mp.Meter(ScopeName)
	o := &observer{tracer: c.tp.Tracer(ScopeName), noKeys: c.noKeys}
	o.wait, _ = m.Float64Histogram("lockyard.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long an acquisition waited for its lock or permit."))
	o.hold, _ = m.Float64Histogram("lockyard.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a lock or permit was held, from its outermost acquisition to its release."))
	return registry.Observer{Acquired: o.acquired, Released: o.released, Lost: o.lost, RenewalFailed: o.renewalFailed}
}

func (o *observer) attrs(e registry.Event) []attribute.KeyValue {
	kv := []attribute.KeyValue{KeyKind.String(e.Kind)}
	if !o.noKeys {
		kv = append(kv, KeyKey.String(e.Key))
	}
	if e.Fence != 0 {
		kv = append(kv, KeyFence.Int64(e.Fence))
	}
	return kv
}

// span records a span name that ran for d until now.
func (o *observer) span(name string, e registry.Event, d time.Duration, err error) {
	end := time.Now()
	_, sp := o.tracer.Start(context.Background(), name, trace.WithTimestamp(end.Add(-d)), trace.WithAttributes(o.attrs(e)...))
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End(trace.WithTimestamp(end))
}

func (o *observer) acquired(e registry.Event) {
	if o.wait != nil && e.Wait > 0 { // 0: TryLock, which does not wait (nor count in Stats.Waits)
		o.wait.Record(context.Background(), e.Wait.Seconds(), metric.WithAttributes(KeyKind.String(e.Kind)))
	}
	if e.Wait > 0 {
		o.span("lockyard.wait", e, e.Wait, nil)
	}
}

func (o *observer) released(e registry.Event) {
	if o.hold != nil {
		o.hold.Record(context.Background(), e.Held.Seconds(), metric.WithAttributes(KeyKind.String(e.Kind)))
	}
	o.span("lockyard.hold", e, e.Held, nil)
}

func (o *observer) lost(e registry.Event) { o.span("lockyard.lost", e, 0, registry.ErrLockLost) }

func (o *observer) renewalFailed(e registry.Event) { o.span("lockyard.renewal_failed", e, 0, e.Err) }

// RegisterMetrics registers the counters and gauges of reg.Stats as
// asynchronous instruments of the meter provider, read at each collection:
// lockyard.acquisitions, lockyard.acquisitions.contended,
// lockyard.not_obtained, lockyard.gave_up, lockyard.lost,
// lockyard.release_failed, lockyard.renewals, lockyard.renewals.failed,
// lockyard.redis.errors and lockyard.native.fallbacks (counters), and lockyard.held, lockyard.waiting
// and lockyard.cached (gauges). Unregister the returned registration when
// the registry is closed.
func RegisterMetrics(reg *registry.Registry, opts ...Option) (metric.Registration, error) {
	m := newConfig(opts).mp.Meter(ScopeName)
	type counter struct {
		name, desc string
		get        func(registry.Stats) int64
		inst       metric.Int64ObservableCounter
	}
	counters := []*counter{
		{name: "lockyard.acquisitions", desc: "Outermost acquisitions.", get: func(s registry.Stats) int64 { return int64(s.Acquisitions) }},
		{name: "lockyard.acquisitions.contended", desc: "Acquisitions that waited for another holder.", get: func(s registry.Stats) int64 { return int64(s.Contended) }},
		{name: "lockyard.not_obtained", desc: "Attempts that did not wait and found the lock taken.", get: func(s registry.Stats) int64 { return int64(s.NotObtained) }},
		{name: "lockyard.gave_up", desc: "Waits ended by their context.", get: func(s registry.Stats) int64 { return int64(s.GaveUp) }},
		{name: "lockyard.lost", desc: "Holds lost before their release.", get: func(s registry.Stats) int64 { return int64(s.LostLocks) }},
		{name: "lockyard.release_failed", desc: "Releases that failed in Redis.", get: func(s registry.Stats) int64 { return int64(s.ReleaseFailed) }},
		{name: "lockyard.renewals", desc: "Successful renewals.", get: func(s registry.Stats) int64 { return int64(s.Renewals) }},
		{name: "lockyard.renewals.failed", desc: "Failed renewals.", get: func(s registry.Stats) int64 { return int64(s.RenewalsFailed) }},
		{name: "lockyard.redis.errors", desc: "Failed Redis calls.", get: func(s registry.Stats) int64 { return int64(s.RedisErrors) }},
		{name: "lockyard.native.fallbacks", desc: "Renewals and releases that a native command could not serve, run by script.", get: func(s registry.Stats) int64 { return int64(s.NativeFallbacks) }},
	}
	var insts []metric.Observable
	for _, c := range counters {
		inst, err := m.Int64ObservableCounter(c.name, metric.WithDescription(c.desc))
		if err != nil {
			return nil, err
		}
		c.inst = inst
		insts = append(insts, inst)
	}
	held, err := m.Int64ObservableGauge("lockyard.held", metric.WithDescription("Locks, leases and permits held now."))
	if err != nil {
		return nil, err
	}
	waiting, err := m.Int64ObservableGauge("lockyard.waiting", metric.WithDescription("Calls waiting for a lock or permit now."))
	if err != nil {
		return nil, err
	}
	cached, err := m.Int64ObservableGauge("lockyard.cached", metric.WithDescription("Locks in the registry's cache."))
	if err != nil {
		return nil, err
	}
	insts = append(insts, held, waiting, cached)
	return m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		s := reg.Stats()
		for _, c := range counters {
			ob.ObserveInt64(c.inst, c.get(s))
		}
		ob.ObserveInt64(held, s.Held)
		ob.ObserveInt64(waiting, s.Waiting)
		ob.ObserveInt64(cached, int64(s.CachedLocks))
		return nil
	}, insts...)
}
