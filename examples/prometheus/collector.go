// Command prometheus exports a lockyard registry's Stats as Prometheus
// metrics on /metrics. It is a module of its own, so that the library does
// not depend on the Prometheus client.
//
//	go run . -redis 127.0.0.1:6379 -listen 127.0.0.1:9187
package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockyard/lockyard/registry"
)

// Collector reads a registry's Stats at each scrape.
type Collector struct {
	reg *registry.Registry
	acquisitions, contended, renewals, lost, redisErrors,
	cached, wait *prometheus.Desc
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
	}
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.acquisitions, c.contended, c.renewals, c.lost, c.redisErrors, c.cached, c.wait} {
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
	ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(s.CachedLocks))
	buckets := make(map[float64]uint64, len(registry.WaitBuckets))
	for i, b := range registry.WaitBuckets {
		buckets[b.Seconds()] = s.WaitCounts[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.wait, s.Waits, s.WaitSum.Seconds(), buckets)
}
