package redlockc

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// osThreads is the process's OS thread count (/proc/self/status Threads).
func osThreads(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatalf("open /proc/self/status: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := s.Text(); strings.HasPrefix(line, "Threads:") {
			v := strings.TrimPrefix(line, "Threads:")
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("Threads: %q", v)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// waitUntil polls cond every 10 ms for at most limit.
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

// A goroutine waiting in LockContext waits on a channel of the client's
// engine loop, not in a cgo call: a thousand of them on one held lock add
// no OS thread (the blocking API took one thread per waiter: 9 -> 208 for
// 200). Released, they get the lock one at a time, or their context ends.
func TestAThousandWaitingGoroutinesTakeNoOSThread(t *testing.T) {
	const waiters = 1000
	c := newClient(t, "")
	n := name(t)
	holder := newLock(t, c, n)
	if err := holder.Lock(); err != nil {
		t.Fatalf("holder.Lock: %v", err)
	}
	locks := make([]*Lock, waiters)
	for i := range locks {
		locks[i] = newLock(t, c, n)
	}
	before := osThreads(t)

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var inside, overlaps, acquired, canceled atomic.Int64
	results := make(chan error, waiters)
	for _, l := range locks {
		l := l
		go func() {
			err := l.LockContext(ctx)
			if err == nil {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				acquired.Add(1)
				inside.Add(-1)
				err = l.Unlock()
			} else if errors.Is(err, context.DeadlineExceeded) {
				canceled.Add(1)
				err = nil
			}
			results <- err
		}()
	}
	waitUntil(t, 20*time.Second, "1,000 acquisitions waiting", func() bool {
		s, err := c.Stats()
		return err == nil && s.Waiters == waiters
	})
	during := osThreads(t)
	if during > before+10 {
		t.Fatalf("OS threads: %d before the waiters, %d with 1,000 waiting (expected at most +10)", before, during)
	}

	if err := holder.Unlock(); err != nil {
		t.Fatalf("holder.Unlock: %v", err)
	}
	for i := 0; i < waiters; i++ {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d waiters still waiting 60 s after the release", waiters-i, waiters)
		}
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d waiters held the lock at once", overlaps.Load())
	}
	if acquired.Load() == 0 {
		t.Error("no waiter got the lock after the release")
	}
	t.Logf("threads: %d before, %d with 1,000 waiting; %d waiters acquired in turn, %d ended by their context", before, during,
		acquired.Load(), canceled.Load())
	if s, err := c.Stats(); err != nil || s.Waiters != 0 || s.LocksHeld != 0 {
		t.Errorf("after: Waiters %d LocksHeld %d (%v), expected 0 and 0", s.Waiters, s.LocksHeld, err)
	}
}
