package redlockc

/*
#include "shim.h"
*/
import "C"

import (
	"math"
	"time"
)

// What an acquisition ended with, in Stats.AcquireWait.
const (
	ResultAcquired = "acquired" // held
	ResultBusy     = "busy"     // another owner held it until the wait ran out
	ResultCanceled = "canceled" // its context ended it (a grant that came anyway was given back)
	ResultError    = "error"    // the library failed (connection, timeout, closed...)
)

// Why a hold was lost, in Stats.Lost.
const (
	LostExpired       = "expired"        // a fixed lease ran out before Release
	LostTaken         = "taken"          // a renewal, loss push or release found it gone
	LostRenewalFailed = "renewal_failed" // renewals failed until its validity ran out
)

// Stats is what a client's Lock values did and do, for a metrics exporter
// (the promredlock package serves them to Prometheus). Counters count from
// the client's start.
type Stats struct {
	LocksHeld int // holds of this client's Lock values now (lost ones not counted)
	Waiters   int // acquisitions with a wait in progress now (TryLock not counted)
	// AcquireWait is the time each acquisition took, from the call to its
	// end, by result (ResultAcquired...), TryLock included.
	AcquireWait map[string]WaitHistogram
	Lost        map[string]uint64 // holds lost, by reason (LostExpired...)
	// Renewals of watchdog holds: "ok" renewed in time (the engine's count,
	// one per hold per round), "lost" a watchdog hold they could not keep.
	Renewals map[string]uint64
}

// WaitHistogram is a histogram of waits: Buckets are cumulative (the count
// of waits that took at most Le); the last Le is math.MaxInt64 (no bound).
type WaitHistogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []WaitBucket
}

// stats is the loop's record behind Stats.
type stats struct {
	bounds       []int64 // bucket bounds in ms, the library's (rlc_metric_bucket_ms)
	waits        map[string]*histogram
	lost         map[string]uint64
	renewalsLost uint64
	waiters      int
}

type histogram struct {
	count, sumMs uint64
	buckets      []uint64 // not cumulative
}

func (s *stats) init() {
	for i := 0; i < C.RLC_M_WAIT_BUCKETS; i++ {
		s.bounds = append(s.bounds, int64(C.rlc_metric_bucket_ms(C.int(i))))
	}
	s.waits = map[string]*histogram{}
	for _, r := range []string{ResultAcquired, ResultBusy, ResultCanceled, ResultError} {
		s.waits[r] = &histogram{buckets: make([]uint64, len(s.bounds))}
	}
	s.lost = map[string]uint64{LostExpired: 0, LostTaken: 0, LostRenewalFailed: 0}
}

func (s *stats) observe(result string, tookMs int64) {
	h := s.waits[result]
	h.count++
	if tookMs > 0 {
		h.sumMs += uint64(tookMs)
	}
	for i, le := range s.bounds {
		if tookMs <= le {
			h.buckets[i]++
			return
		}
	}
}

func (s *stats) snapshot(held int, renewalsOK uint64) Stats {
	out := Stats{LocksHeld: held, Waiters: s.waiters, AcquireWait: map[string]WaitHistogram{},
		Lost: map[string]uint64{}, Renewals: map[string]uint64{"ok": renewalsOK, "lost": s.renewalsLost}}
	for r, h := range s.waits {
		w := WaitHistogram{Count: h.count, Sum: time.Duration(h.sumMs) * time.Millisecond}
		var total uint64
		for i, le := range s.bounds {
			total += h.buckets[i]
			d := time.Duration(math.MaxInt64)
			if le != math.MaxInt64 {
				d = time.Duration(le) * time.Millisecond
			}
			w.Buckets = append(w.Buckets, WaitBucket{Le: d, Count: total})
		}
		out.AcquireWait[r] = w
	}
	for r, n := range s.lost {
		out.Lost[r] = n
	}
	return out
}

// Stats reads what the client's Lock values did and do (no network I/O).
// The lock family (RWLock, FairLock, semaphores, MultiLock) is not counted.
func (c *Client) Stats() (Stats, error) {
	var out Stats
	err := c.d.do("stats", func() {
		var v [64]C.uint64_t
		C.rlc_engine_metrics(c.d.e, &v[0], 64)
		out = c.d.stats.snapshot(len(c.d.holds), uint64(v[C.RLC_M_RENEWALS]))
	})
	return out, err
}
