package promredlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	redlockc "github.com/libredlockc/libredlockc/bindings/go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The redis-server tests/runtimes/run.sh starts and names in RLC_TEST_REDIS.
func server(t *testing.T) string {
	t.Helper()
	uri := os.Getenv("RLC_TEST_REDIS")
	if uri == "" {
		t.Fatal("RLC_TEST_REDIS is not set: run tests/runtimes/run.sh")
	}
	return uri
}

// serve serves reg with promhttp on a free loopback port; the URL of /metrics.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/metrics"
}

// scrape is what a Prometheus server reads: the families by name.
type scrape map[string]*dto.MetricFamily

func get(t *testing.T, url string) scrape {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return families
}

// find is the sample of family name whose labels include want.
func (s scrape) find(t *testing.T, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := s[name]
	if !ok {
		t.Fatalf("no %s in the scrape", name)
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with labels %v in the scrape", name, want)
	return nil
}

func (s scrape) value(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	m := s.find(t, name, labels)
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	t.Fatalf("%s is not a gauge or a counter", name)
	return 0
}

func (s scrape) waits(t *testing.T, client, result string) uint64 {
	t.Helper()
	m := s.find(t, "redlock_acquire_wait_seconds", map[string]string{"client": client, "result": result})
	if m.Histogram == nil {
		t.Fatal("redlock_acquire_wait_seconds is not a histogram")
	}
	return m.Histogram.GetSampleCount()
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newClient(t *testing.T, opts ...redlockc.Option) *redlockc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := redlockc.New(ctx, server(t), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newLock(t *testing.T, c *redlockc.Client, name string, opts ...redlockc.LockOption) *redlockc.Lock {
	t.Helper()
	l, err := c.NewLock(name, opts...)
	if err != nil {
		t.Fatalf("NewLock: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Scraped over HTTP, the metrics say what the test did: holds and waiters
// now, each acquisition by result, a fixed lease that ran out, renewals.
func TestMetricsScrapedOverHTTPMatchTheOperations(t *testing.T) {
	const label = "orders-service"
	c := newClient(t, redlockc.WithWatchdogTimeout(300*time.Millisecond))
	reg := prometheus.NewRegistry()
	if err := reg.Register(New(c, label)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	url := serve(t, reg)
	me := map[string]string{"client": label}
	n := fmt.Sprintf("go-prom-%d", time.Now().UnixNano())

	s := get(t, url)
	for _, name := range []string{"redlock_locks_held", "redlock_waiters"} {
		if v := s.value(t, name, me); v != 0 {
			t.Fatalf("%s before any lock: expected 0, saw %v", name, v)
		}
	}

	holder, other, waiter := newLock(t, c, n), newLock(t, c, n), newLock(t, c, n)
	if err := holder.Lock(); err != nil {
		t.Fatalf("holder.Lock: %v", err)
	}
	if ok, err := other.TryLock(); ok || err != nil {
		t.Fatalf("TryLock on a held lock: (%v, %v)", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- waiter.LockContext(ctx) }()
	waitUntil(t, 10*time.Second, "the waiter waits", func() bool {
		st, err := c.Stats()
		return err == nil && st.Waiters == 1
	})
	// Watchdog renewals every 100 ms while held.
	waitUntil(t, 10*time.Second, "two renewals", func() bool {
		st, err := c.Stats()
		return err == nil && st.Renewals["ok"] >= 2
	})
	s = get(t, url)
	if v := s.value(t, "redlock_locks_held", me); v != 1 {
		t.Errorf("redlock_locks_held while held: expected 1, saw %v", v)
	}
	if v := s.value(t, "redlock_waiters", me); v != 1 {
		t.Errorf("redlock_waiters with one waiting: expected 1, saw %v", v)
	}
	if v := s.value(t, "redlock_renewals_total", map[string]string{"client": label, "result": "ok"}); v < 2 {
		t.Errorf("redlock_renewals_total{result=ok} after 2 renewals: saw %v", v)
	}
	if v := s.waits(t, label, "acquired"); v != 1 {
		t.Errorf("acquisitions acquired: expected 1, saw %d", v)
	}
	if v := s.waits(t, label, "busy"); v != 1 {
		t.Errorf("acquisitions busy (the TryLock): expected 1, saw %d", v)
	}

	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: expected context.Canceled, saw %v", err)
	}
	if err := holder.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	leased := newLock(t, c, n+"-leased", redlockc.WithLease(200*time.Millisecond))
	if err := leased.Lock(); err != nil {
		t.Fatalf("Lock with a 200 ms lease: %v", err)
	}
	select {
	case <-leased.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("no lost notice 10 s after a 200 ms lease")
	}

	s = get(t, url)
	lost := map[string]string{"client": label, "reason": "expired"}
	checks := []struct {
		what      string
		got, want float64
	}{
		{"redlock_locks_held after the release and the lease's end", s.value(t, "redlock_locks_held", me), 0},
		{"redlock_waiters after the cancel", s.value(t, "redlock_waiters", me), 0},
		{"redlock_lock_lost_total{reason=expired}", s.value(t, "redlock_lock_lost_total", lost), 1},
		{"acquisitions canceled", float64(s.waits(t, label, "canceled")), 1},
		{"acquisitions acquired", float64(s.waits(t, label, "acquired")), 2},
		{"acquisitions busy", float64(s.waits(t, label, "busy")), 1},
		{"acquisitions error", float64(s.waits(t, label, "error")), 0},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: expected %v, saw %v", ch.what, ch.want, ch.got)
		}
	}
}

// The client label is the user's: a second client under another label is
// a series of its own; the same label twice is refused at registration.
func TestTheClientLabelIsChosenAndStable(t *testing.T) {
	a, b := newClient(t), newClient(t)
	reg := prometheus.NewRegistry()
	if err := reg.Register(New(a, "billing")); err != nil {
		t.Fatalf("Register billing: %v", err)
	}
	if err := reg.Register(New(b, "shipping")); err != nil {
		t.Fatalf("Register shipping beside billing: %v", err)
	}
	var dup prometheus.AlreadyRegisteredError
	if err := reg.Register(New(b, "billing")); !errors.As(err, &dup) {
		t.Fatalf("a second collector labelled billing: expected AlreadyRegisteredError, saw %v", err)
	}
	l := newLock(t, b, fmt.Sprintf("go-prom-label-%d", time.Now().UnixNano()))
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	s := get(t, serve(t, reg))
	if v := s.value(t, "redlock_locks_held", map[string]string{"client": "shipping"}); v != 1 {
		t.Errorf("shipping's redlock_locks_held: expected 1, saw %v", v)
	}
	if v := s.value(t, "redlock_locks_held", map[string]string{"client": "billing"}); v != 0 {
		t.Errorf("billing's redlock_locks_held: expected 0, saw %v", v)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
