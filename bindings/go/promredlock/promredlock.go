// Package promredlock serves a redlockc client's Stats to Prometheus
// (client_golang), named by the Prometheus conventions:
//
//	redlock_acquire_wait_seconds{client, result}  histogram: each acquisition's time
//	                                               (result: acquired, busy, canceled, error)
//	redlock_locks_held{client}                     gauge: holds now
//	redlock_waiters{client}                        gauge: acquisitions waiting now
//	redlock_lock_lost_total{client, reason}        counter (reason: expired, taken, renewal_failed)
//	redlock_renewals_total{client, result}         counter (result: ok, lost)
//
// client is a label you choose, stable across restarts (a service name),
// so a restart continues its series instead of starting new ones:
//
//	prometheus.MustRegister(promredlock.New(c, "orders"))
//
// It is a module of its own, so the redlockc module itself has no
// dependency. The lock family (RWLock, FairLock, semaphores, MultiLock) is
// not counted: see redlockc.Stats.
package promredlock

import (
	"errors"
	"math"
	"sort"

	redlockc "github.com/libredlockc/libredlockc/bindings/go"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector is a prometheus.Collector of one client's Stats.
type Collector struct {
	client                            *redlockc.Client
	wait, held, waiters, lost, renews *prometheus.Desc
}

// New collects c's Stats under the label client="<client>". Two collectors
// with the same label cannot both be registered in one registry.
func New(c *redlockc.Client, client string) *Collector {
	labels := prometheus.Labels{"client": client}
	return &Collector{
		client: c,
		wait: prometheus.NewDesc("redlock_acquire_wait_seconds",
			"Time each lock acquisition took, from the call to its end, by result.",
			[]string{"result"}, labels),
		held: prometheus.NewDesc("redlock_locks_held",
			"Locks held by this client now.", nil, labels),
		waiters: prometheus.NewDesc("redlock_waiters",
			"Lock acquisitions waiting now.", nil, labels),
		lost: prometheus.NewDesc("redlock_lock_lost_total",
			"Holds lost before their release, by reason.", []string{"reason"}, labels),
		renews: prometheus.NewDesc("redlock_renewals_total",
			"Watchdog renewals: ok renewed in time; lost a watchdog hold they could not keep.",
			[]string{"result"}, labels),
	}
}

// Describe sends the five metrics' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.wait, c.held, c.waiters, c.lost, c.renews} {
		ch <- d
	}
}

// Collect reads the client's Stats (no network I/O). A closed client
// reports nothing.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.client.Stats()
	if errors.Is(err, redlockc.ErrClosed) {
		return
	}
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.held, err)
		return
	}
	for _, result := range sortedKeys(s.AcquireWait) {
		h := s.AcquireWait[result]
		buckets := map[float64]uint64{}
		for _, b := range h.Buckets {
			if b.Le != math.MaxInt64 { // +Inf is the count
				buckets[b.Le.Seconds()] = b.Count
			}
		}
		ch <- prometheus.MustNewConstHistogram(c.wait, h.Count, h.Sum.Seconds(), buckets, result)
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.LocksHeld))
	ch <- prometheus.MustNewConstMetric(c.waiters, prometheus.GaugeValue, float64(s.Waiters))
	for _, reason := range sortedKeys(s.Lost) {
		ch <- prometheus.MustNewConstMetric(c.lost, prometheus.CounterValue, float64(s.Lost[reason]), reason)
	}
	for _, result := range sortedKeys(s.Renewals) {
		ch <- prometheus.MustNewConstMetric(c.renews, prometheus.CounterValue, float64(s.Renewals[result]), result)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
