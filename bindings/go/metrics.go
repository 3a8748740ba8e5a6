package redlockc

/*
#include <stdint.h>
#include "shim.h"
*/
import "C"

import (
	"math"
	"time"
	"unsafe"
)

// Metrics are a client's counters since it was made (rlc_client_metrics,
// libredlockc 1.1). WaitBuckets are cumulative: the waits that took at most
// Le (the last Le is math.MaxInt64: no bound).
type Metrics struct {
	Acquires, Busy, Waits, Renewals, Lost, Reconnects, ScriptReloads uint64
	WaitTotal                                                        time.Duration
	WaitBuckets                                                      []WaitBucket
}

// WaitBucket is one bucket of the wait histogram.
type WaitBucket struct {
	Le    time.Duration
	Count uint64
}

// Metrics reads the client's counters (no network I/O): its engine's (Lock
// values) and, once the lock family or ForceRelease has been used, those of
// the library's blocking client too, added up (the same counters).
func (c *Client) Metrics() (Metrics, error) {
	var v [64]C.uint64_t
	n := 0
	if err := c.d.do("metrics", func() {
		n = int(C.rlc_engine_metrics(c.d.e, (*C.uint64_t)(unsafe.Pointer(&v[0])), 64))
	}); err != nil {
		return Metrics{}, err
	}
	c.mu.Lock()
	if c.blk != nil {
		var b [64]C.uint64_t
		C.rlc_client_metrics(c.blk, (*C.uint64_t)(unsafe.Pointer(&b[0])), 64)
		for i := range v {
			v[i] += b[i]
		}
	}
	c.mu.Unlock()
	if n > 64 {
		n = 64
	}
	m := Metrics{}
	var total uint64
	bucket := 0
	for i := 0; i < n; i++ {
		value := uint64(v[i])
		switch C.GoString(C.rlc_metric_name(C.int(i))) {
		case "acquires":
			m.Acquires = value
		case "busy":
			m.Busy = value
		case "waits":
			m.Waits = value
		case "renewals":
			m.Renewals = value
		case "lost":
			m.Lost = value
		case "reconnects":
			m.Reconnects = value
		case "script_reloads":
			m.ScriptReloads = value
		case "wait_ms_sum":
			m.WaitTotal = time.Duration(value) * time.Millisecond
		case "wait_bucket":
			total += value
			le := int64(C.rlc_metric_bucket_ms(C.int(bucket)))
			d := time.Duration(math.MaxInt64)
			if le != math.MaxInt64 {
				d = time.Duration(le) * time.Millisecond
			}
			m.WaitBuckets = append(m.WaitBuckets, WaitBucket{Le: d, Count: total})
			bucket++
		}
	}
	return m, nil
}
