package redlockc

import (
	"math"
	"testing"
)

func TestMetricsCountAcquiresAndBusy(t *testing.T) {
	a, b := newClient(t, ""), newClient(t, "")
	n := name(t)
	mine, other := newLock(t, a, n), newLock(t, b, n)
	mine.Lock()
	if ok, err := other.TryLock(); ok || err != nil {
		t.Fatalf("TryLock on a held lock: %v %v", ok, err)
	}
	mine.Unlock()
	ma, err := a.Metrics()
	if err != nil || ma.Acquires != 1 || ma.Busy != 0 {
		t.Fatalf("holder's metrics: %+v %v", ma, err)
	}
	mb, _ := b.Metrics()
	if mb.Busy != 1 || mb.Acquires != 0 {
		t.Fatalf("the refused client's metrics: %+v", mb)
	}
	last := mb.WaitBuckets[len(mb.WaitBuckets)-1]
	if len(mb.WaitBuckets) != 12 || last.Le != math.MaxInt64 || last.Count != mb.Waits {
		t.Fatalf("wait buckets: %+v (waits %d)", mb.WaitBuckets, mb.Waits)
	}
	a.Close()
	if _, err := a.Metrics(); err == nil {
		t.Fatal("Metrics on a closed client: expected ErrClosed")
	}
}
