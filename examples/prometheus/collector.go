// Command prometheus exports a lockyard registry's Stats as Prometheus
// metrics on /metrics. It is a module of its own, so that the library does
// not depend on the Prometheus client.
//
//	go run . -redis 127.0.0.1:6379 -listen 127.0.0.1:9187
package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockyard/lockyard/registry"
)

// Collector reads a registry's Stats at each scrape.
type Collector struct {
	reg *registry.Registry
	acquisitions, contended, renewals, lost, redisErrors,
	notObtained, gaveUp, releaseFailed, renewalsFailed, nativeFallbacks,
	cached, held, waiting, wait, hold *prometheus.Desc
}

// NewCollector returns a collector for reg; its metrics carry the label
// registry="name".
func NewCollector(reg *registry.Registry, name string) *Collector {
	labels := prometheus.Labels{"registry": name}
	d := func(n, help string) *prometheus.Desc {
		return prometheus.NewDesc("lockyard_"+n, help, nil, labels)
	}
	return &Collector{
		reg:          reg,
		acquisitions: d("acquisitions_total", "Outermost lock acquisitions."),
		contended:    d("contended_acquisitions_total", "Acquisitions that waited for another holder."),
		renewals:     d("renewals_total", "Successful lock renewals."),
		lost:         d("lost_locks_total", "Holds lost before their release."),
		redisErrors:  d("redis_errors_total", "Failed Redis calls."),
		cached:       d("cached_locks", "Locks in the registry's cache."),
		wait:         d("wait_seconds", "Time Lock, LockContext and ExecuteLocked waited for a lock."),

		notObtained:     d("not_obtained_total", "TryLock and TryAcquire calls that found the lock or every permit taken."),
		gaveUp:          d("gave_up_total", "Waits ended by their context."),
		releaseFailed:   d("release_failed_total", "Releases that failed in Redis (the key expires by its TTL)."),
		renewalsFailed:  d("renewals_failed_total", "Renewals that failed (the hold stays valid until its deadline)."),
		nativeFallbacks: d("native_fallbacks_total", "Renewals and releases that a native command (SET IFEQ, DELEX, DELIFEQ) could not serve, run by script."),
		held:            d("held", "Locks, leases and permits held now."),
		waiting:         d("waiting", "Calls waiting for a lock or permit now."),
		hold:            d("hold_seconds", "Time from an outermost acquisition to its release."),
	}
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquisitions, c.contended, c.renewals, c.lost, c.redisErrors,
		c.notObtained, c.gaveUp, c.releaseFailed, c.renewalsFailed, c.nativeFallbacks, c.cached, c.held, c.waiting, c.wait, c.hold} {
		ch <- d
	}
}

// Collect sends the current values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.reg.Stats()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	counter(c.acquisitions, s.Acquisitions)
	counter(c.contended, s.Contended)
	counter(c.renewals, s.Renewals)
	counter(c.lost, s.LostLocks)
	counter(c.redisErrors, s.RedisErrors)
	counter(c.notObtained, s.NotObtained)
	counter(c.gaveUp, s.GaveUp)
	counter(c.releaseFailed, s.ReleaseFailed)
	counter(c.renewalsFailed, s.RenewalsFailed)
	counter(c.nativeFallbacks, s.NativeFallbacks)
	ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(s.CachedLocks))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.Held))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(s.Waiting))
	ch <- prometheus.MustNewConstHistogram(c.wait, s.Waits, s.WaitSum.Seconds(), histogram(registry.WaitBuckets, s.WaitCounts))
	ch <- prometheus.MustNewConstHistogram(c.hold, s.Holds, s.HoldSum.Seconds(), histogram(registry.HoldBuckets, s.HoldCounts))
}

// histogram pairs cumulative counts with their bounds, in seconds.
func histogram(bounds []time.Duration, counts []uint64) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	for i, b := range bounds {
		out[b.Seconds()] = counts[i]
	}
	return out
}
