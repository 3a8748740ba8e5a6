package redlockc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The suites run against a real redis-server that tests/runtimes/run.sh
// starts (tests/support) and names in RLC_TEST_REDIS. Without one, fail.
func server(t *testing.T) string {
	t.Helper()
	uri := os.Getenv("RLC_TEST_REDIS")
	if uri == "" {
		t.Fatal("RLC_TEST_REDIS is not set: run tests/runtimes/run.sh")
	}
	return uri
}

func newClient(t *testing.T, options string) *Client {
	t.Helper()
	c, err := NewClient(server(t), options)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newLock(t *testing.T, c *Client, name string) *Lock {
	t.Helper()
	l, err := c.NewLock(name)
	if err != nil {
		t.Fatalf("NewLock(%q): %v", name, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A unique name per test run: the server is shared by the package's tests.
func name(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", t.Name(), time.Now().UnixNano())
}

func TestTwoLockValuesExcludeEachOther(t *testing.T) {
	c := newClient(t, "")
	n := name(t)
	a, b := newLock(t, c, n), newLock(t, c, n)
	a.Lock()
	if ok, err := b.TryLock(); ok || err != nil {
		t.Fatalf("b.TryLock while a holds: expected (false, nil), saw (%v, %v)", ok, err)
	}
	if held, err := a.Held(); !held || err != nil {
		t.Fatalf("a.Held: expected (true, nil), saw (%v, %v)", held, err)
	}
	a.Unlock()
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("b.TryLock after a.Unlock: expected (true, nil), saw (%v, %v)", ok, err)
	}
	b.Unlock()
	if locked, err := a.Locked(); locked || err != nil {
		t.Fatalf("Locked after both unlocked: expected (false, nil), saw (%v, %v)", locked, err)
	}
}

// Goroutines sharing one Lock value take turns locally (its channel is the
// happens-before edge the race detector sees); goroutines with Lock values
// of their own exclude each other only through Redis, which the race
// detector cannot see, so their counter is read and written with atomics:
// a missing exclusion shows as lost updates and overlaps, not as a race.
func TestGoroutinesTakeTurnsSharedAndSeparateValues(t *testing.T) {
	c := newClient(t, "")
	n := name(t)
	shared := newLock(t, c, n)
	const workers, rounds = 6, 15
	var counter, inside, overlaps atomic.Int64
	var plain int // touched only under shared: the race detector checks it
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*rounds)
	for w := 0; w < 2*workers; w++ {
		own := w%2 == 1
		l := shared
		if own {
			l = newLock(t, c, n)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := l.LockContext(ctx)
				cancel()
				if err != nil {
					errs <- err
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				v := counter.Load()
				time.Sleep(100 * time.Microsecond) // widen the window a lost update needs
				counter.Store(v + 1)
				if !own {
					plain++
				}
				inside.Add(-1)
				if err := l.Release(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker error: %v", err)
	}
	if got, want := counter.Load(), int64(2*workers*rounds); got != want {
		t.Errorf("counter: expected %d, saw %d (lost updates)", want, got)
	}
	if overlaps.Load() != 0 {
		t.Errorf("overlaps: expected 0, saw %d", overlaps.Load())
	}
	if plain != workers*rounds {
		t.Errorf("shared-value counter: expected %d, saw %d", workers*rounds, plain)
	}
}

func TestLockContextEndsWithTheContext(t *testing.T) {
	c := newClient(t, "")
	n := name(t)
	holder, waiter := newLock(t, c, n), newLock(t, c, n)
	holder.Lock()
	defer holder.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := waiter.LockContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: expected context.DeadlineExceeded, saw %v", err)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- waiter.LockContext(ctx2) }()
	time.Sleep(300 * time.Millisecond) // inside the C wait by now (a cancel before it counts too)
	cancelled := time.Now()
	cancel2()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: expected context.Canceled, saw %v", err)
		}
		if took := time.Since(cancelled); took > 500*time.Millisecond {
			t.Fatalf("cancel: LockContext returned %v after cancel; the wait is cancelled at once", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel: LockContext did not return within 10 s of cancel")
	}
	if ok, _ := waiter.TryLock(); ok {
		t.Fatal("the waiter holds the lock after giving up")
	}
}

// A context past its deadline whose timer has not fired yet (Err is still
// nil): LockContext must give up, not pass a negative wait (= forever) on.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (pastDeadline) Err() error                  { return nil }

func TestLockContextPastDeadlineDoesNotWaitForever(t *testing.T) {
	c := newClient(t, "")
	n := name(t)
	holder, waiter := newLock(t, c, n), newLock(t, c, n)
	holder.Lock()
	defer holder.Unlock()
	ctx, cancel := context.WithCancel(context.Background()) // never cancelled before the end
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waiter.LockContext(pastDeadline{ctx}) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("expected context.DeadlineExceeded, saw %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LockContext still waiting 10 s after its deadline")
	}
}

func TestWaiterGetsTheLockOnRelease(t *testing.T) {
	c := newClient(t, "")
	n := name(t)
	holder, waiter := newLock(t, c, n), newLock(t, c, n)
	holder.Lock()
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		got <- waiter.LockContext(ctx)
	}()
	holder.Unlock()
	if err := <-got; err != nil {
		t.Fatalf("waiter: expected the lock after release, saw %v", err)
	}
	waiter.Unlock()
}

// Goroutines move between OS threads; each error must still carry the
// message of its own failing call (rlc_errmsg is per OS thread).
func TestErrorsCarryTheirOwnCallsMessage(t *testing.T) {
	c := newClient(t, "")
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		n := fmt.Sprintf("%s-%d", name(t), i)
		l := newLock(t, c, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.turn <- struct{}{} // pretend held locally: the server says otherwise
			err := l.Release()
			if !errors.Is(err, ErrNotOwner) {
				t.Errorf("release of %s: expected ErrNotOwner, saw %v", n, err)
				return
			}
			if !strings.Contains(err.Error(), "'"+n+"'") {
				t.Errorf("release of %s: message names another lock: %v", n, err)
			}
		}()
	}
	wg.Wait()
}

func TestLostIsReportedOnTheChannel(t *testing.T) {
	c := newClient(t, "watchdog_timeout_ms=600")
	n := name(t)
	l, other := newLock(t, c, n), newLock(t, c, n)
	l.Lock()
	if err := other.ForceRelease(); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	select {
	case err := <-l.Lost():
		if !errors.Is(err, ErrLost) {
			t.Fatalf("lost notice: expected ErrLost, saw %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no lost notice within 10 s (renewal every 200 ms)")
	}
	if err := l.Release(); !errors.Is(err, ErrLost) {
		t.Fatalf("Release after loss: expected ErrLost, saw %v", err)
	}
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock after the loss was reported: expected (true, nil), saw (%v, %v)", ok, err)
	}
	l.Unlock()
}

// A fixed lease that runs out while a Lock value of another client waits:
// the waiter gets the lock, and the first value says lost from then on.
func TestAFixedLeaseThatRunsOutIsLost(t *testing.T) {
	c, other := newClient(t, "fencing=1"), newClient(t, "fencing=1")
	n := name(t)
	l, err := c.NewLock(n, WithLease(700*time.Millisecond))
	if err != nil {
		t.Fatalf("NewLock: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	waiter := newLock(t, other, n)
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock with a 700 ms lease: expected (true, nil), saw (%v, %v)", ok, err)
	}
	token, err := l.FencingToken()
	if err != nil {
		t.Fatalf("FencingToken while held: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waiter.LockContext(ctx); err != nil {
		t.Fatalf("the other client's waiter: expected the lock once the lease ran out, saw %v", err)
	}
	select {
	case err := <-l.Lost():
		if !errors.Is(err, ErrLost) {
			t.Fatalf("lost notice: expected ErrLost, saw %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no lost notice within 5 s of the waiter getting the lock")
	}
	if held, err := l.Held(); held || err != nil {
		t.Fatalf("Held after the lease ran out: expected (false, nil), saw (%v, %v)", held, err)
	}
	if count, err := l.HoldCount(); count != 0 || err != nil {
		t.Fatalf("HoldCount after the lease ran out: expected (0, nil), saw (%v, %v)", count, err)
	}
	if v, err := l.Validity(); v != 0 || err != nil {
		t.Fatalf("Validity after the lease ran out: expected (0, nil), saw (%v, %v)", v, err)
	}
	if tok, err := l.FencingToken(); !errors.Is(err, ErrLost) {
		t.Fatalf("FencingToken after the lease ran out: expected ErrLost, saw (%v, %v)", tok, err)
	}
	if newer, err := waiter.FencingToken(); err != nil || newer <= token {
		t.Fatalf("the waiter's token: expected more than %d, saw (%v, %v)", token, newer, err)
	}
	if err := l.Release(); !errors.Is(err, ErrLost) {
		t.Fatalf("Release after the lease ran out: expected ErrLost, saw %v", err)
	}
	select {
	case err := <-l.Lost():
		t.Fatalf("a second lost notice for one hold: %v", err)
	case <-time.After(600 * time.Millisecond):
	}
	if held, err := waiter.Held(); !held || err != nil {
		t.Fatalf("the waiter after the late Release: expected (true, nil), saw (%v, %v)", held, err)
	}
	waiter.Unlock()
}

func TestClosedClientFailsWithErrClosed(t *testing.T) {
	c := newClient(t, "")
	l := newLock(t, c, name(t))
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock: expected (true, nil), saw (%v, %v)", ok, err)
	}
	c.Close()
	if err := l.Release(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close: expected ErrClosed, saw %v", err)
	}
	if _, err := c.NewLock("x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewLock after Close: expected ErrClosed, saw %v", err)
	}
	l.Close()
	if _, err := l.Held(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Held after Lock.Close: expected ErrClosed, saw %v", err)
	}
}

func TestFencedSetRefusesASmallerToken(t *testing.T) {
	c := newClient(t, "")
	key := fmt.Sprintf("go-fenced-%d-%d", os.Getpid(), time.Now().UnixNano())
	for _, step := range []struct {
		value string
		token uint64
		want  bool
	}{{"newer", 6, true}, {"again", 6, true}, {"late", 5, false}} {
		got, err := c.FencedSet(key, []byte(step.value), step.token)
		if err != nil || got != step.want {
			t.Fatalf("FencedSet(%q, token %d) = %v, %v; want %v", step.value, step.token, got, err, step.want)
		}
	}
	if _, err := c.FencedSet(key, nil, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("token 0: %v, want ErrInvalid", err)
	}
}
