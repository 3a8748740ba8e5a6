package redlockc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func famName(what string) string {
	return fmt.Sprintf("go-f-%s-%d", what, time.Now().UnixNano())
}

// must returns v, or panics (failing the test) with an unexpected error.
// (Go passes f()'s two results only as all of a call's arguments.)
func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprintf("unexpected error: %v", err))
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRWLockReadersOverlapWriterAlone(t *testing.T) {
	c := newClient(t, "")
	name := famName("rw")
	a := must(c.NewRWLock(name))
	b := must(c.NewRWLock(name))
	w := must(c.NewRWLock(name))
	defer a.Close()
	defer b.Close()
	defer w.Close()
	if !must(a.RLock(0, 0)) || !must(b.RLock(0, 0)) {
		t.Fatal("two readers should hold at once")
	}
	if m := must(a.Mode()); m != "read" {
		t.Fatalf("mode %q, expected read", m)
	}
	if must(w.Lock(50*time.Millisecond, 0)) {
		t.Fatal("a writer got in beside readers")
	}
	noErr(t, a.RUnlock())
	noErr(t, b.RUnlock())
	if !must(w.Lock(0, 10*time.Second)) {
		t.Fatal("the writer should get a free lock")
	}
	if must(a.RLock(0, 0)) {
		t.Fatal("a reader got in while written")
	}
	if !must(w.RLock(0, 0)) {
		t.Fatal("the writer may read")
	}
	if n := must(w.HoldCount(true)); n != 1 {
		t.Fatalf("write hold count %d", n)
	}
	noErr(t, w.RUnlock())
	noErr(t, w.Unlock())
	if err := w.Unlock(); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("unlock without hold: %v, expected ErrNotOwner", err)
	}
}

func TestRWLockConcurrentWritersExcludeEveryone(t *testing.T) {
	c := newClient(t, "")
	name := famName("rwmix")
	var mu sync.Mutex
	readers, writers, maxReaders, violations := 0, 0, 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rw, err := c.NewRWLock(name)
			if err != nil {
				errs <- err
				return
			}
			defer rw.Close()
			write := i%4 == 0
			for k := 0; k < 5; k++ {
				var ok bool
				if write {
					ok, err = rw.Lock(20*time.Second, 0)
				} else {
					ok, err = rw.RLock(20*time.Second, 0)
				}
				if err != nil || !ok {
					errs <- fmt.Errorf("acquire: %v %v", ok, err)
					return
				}
				mu.Lock()
				if write {
					writers++
				} else {
					readers++
				}
				if readers > maxReaders {
					maxReaders = readers
				}
				if writers > 1 || (writers > 0 && readers > 0) {
					violations++
				}
				mu.Unlock()
				time.Sleep(3 * time.Millisecond)
				mu.Lock()
				if write {
					writers--
				} else {
					readers--
				}
				mu.Unlock()
				if write {
					err = rw.Unlock()
				} else {
					err = rw.RUnlock()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if violations != 0 || maxReaders < 2 {
		t.Fatalf("violations %d (want 0), max readers %d (want > 1)", violations, maxReaders)
	}
}

func TestFairLockFIFO(t *testing.T) {
	c := newClient(t, "")
	name := famName("fair")
	holder := must(c.NewFairLock(name, 0))
	defer holder.Close()
	if !must(holder.Lock(0, 20*time.Second)) {
		t.Fatal("holder")
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		l := must(c.NewFairLock(name, 0))
		wg.Add(1)
		go func(i int, l *FairLock) {
			defer wg.Done()
			defer l.Close()
			if ok, err := l.Lock(20*time.Second, 0); !ok || err != nil {
				t.Errorf("waiter %d: %v %v", i, ok, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := l.Unlock(); err != nil {
				t.Error(err)
			}
		}(i, l)
		time.Sleep(150 * time.Millisecond) // each joins the queue before the next
	}
	noErr(t, holder.Unlock())
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3]" {
		t.Fatalf("order %v, expected [0 1 2 3]", order)
	}
}

func TestSemaphoreAndPermitSemaphore(t *testing.T) {
	c := newClient(t, "")
	s := must(c.NewSemaphore(famName("sem"), 2))
	defer s.Close()
	if must(s.TrySetPermits(9)) {
		t.Fatal("TrySetPermits on a set semaphore")
	}
	if !must(s.Acquire(2, 0)) || must(s.Acquire(1, 50*time.Millisecond)) {
		t.Fatal("2 permits then none")
	}
	noErr(t, s.Release(2))
	if n := must(s.Available()); n != 2 {
		t.Fatalf("available %d", n)
	}

	p := must(c.NewPermitSemaphore(famName("psem"), 1))
	defer p.Close()
	id := must(p.Acquire(1, 0, 200*time.Millisecond))
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("permit id %q", id)
	}
	if other := must(p.Acquire(1, 0, time.Second)); other != "" {
		t.Fatal("a second permit of 1")
	}
	back := false
	for i := 0; i < 100 && !back; i++ { // 5 s at most
		back = must(p.Available()) == 1
		time.Sleep(50 * time.Millisecond)
	}
	if !back {
		t.Fatal("the expired permit did not come back")
	}
	if err := p.Release(id); !errors.Is(err, ErrLost) {
		t.Fatalf("late release: %v, expected ErrLost", err)
	}
}

func TestMultiLockAllOrNone(t *testing.T) {
	c := newClient(t, "")
	n1, n2 := famName("m1"), famName("m2")
	blocker := must(c.NewLock(n2, WithLease(20*time.Second)))
	defer blocker.Close()
	if ok, err := blocker.TryLock(); !ok || err != nil {
		t.Fatalf("blocker: %v %v", ok, err)
	}
	m := must(c.NewMultiLock(n1, n2, n1))
	defer m.Close()
	if len(m.Names()) != 2 {
		t.Fatalf("names %v", m.Names())
	}
	if must(m.Lock(0, 0)) {
		t.Fatal("multi lock got a held name")
	}
	probe := must(c.NewLock(n1))
	defer probe.Close()
	if locked, _ := probe.Locked(); locked {
		t.Fatal("a partial hold was left")
	}
	blocker.Unlock()
	if !must(m.Lock(time.Second, 0)) {
		t.Fatal("multi lock after the blocker let go")
	}
	if locked, _ := probe.Locked(); !locked {
		t.Fatal("name 1 not held")
	}
	noErr(t, m.Unlock())
}

func TestFamilyRefusalsAndClosed(t *testing.T) {
	uri := server(t)
	many, err := NewClient(uri+",redis://127.0.0.1:1,redis://127.0.0.1:2", "")
	if err != nil {
		t.Fatal(err)
	}
	defer many.Close()
	if _, err := many.NewFairLock("x", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("fair over 3 masters: %v", err)
	}
	if _, err := many.NewSemaphore("x", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("semaphore over 3 masters: %v", err)
	}
	c := newClient(t, "")
	rw := must(c.NewRWLock(famName("closed")))
	rw.Close()
	if _, err := rw.RLock(0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed rwlock: %v", err)
	}
}

// famWaiting is true once the server shows the family waiter (redis-cli).
func famWaiting(t *testing.T, port int, args ...string) func() bool {
	return func() bool {
		out := redisCli(t, port, args...)
		lines := strings.Split(out, "\n")
		return lines[len(lines)-1] == "1"
	}
}

func awaitTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ { // 10 s
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not seen within 10 s", what)
}

// A family acquire that waits until its context ends is cancelled by that
// end: context.Canceled, and nothing is kept (no level, no permit, no
// writer's intent, no place in the fair queue), as for Lock.LockContext.
func TestFamilyContextEndCancelsTheWaitAndKeepsNothing(t *testing.T) {
	port := freshServer(t)
	c, err := NewClient(fmt.Sprintf("redis://127.0.0.1:%d", port), "")
	noErr(t, err)
	defer c.Close()
	type kind struct {
		hold    func(n string)                            // another owner takes it
		wait    func(ctx context.Context, n string) error // the waiter
		waiting []string                                  // redis-cli args answering 1 while it waits
		after   func(t *testing.T, n string)              // nothing kept
	}
	var rwW, rwR *RWLock
	var fair *FairLock
	var multi *MultiLock
	kinds := map[string]kind{
		"rw-write": {
			hold: func(n string) { must(must(c.NewRWLock(n)).RLock(0, 30*time.Second)) },
			wait: func(ctx context.Context, n string) error {
				rwW = must(c.NewRWLock(n))
				return rwW.LockContext(ctx, 0)
			},
			waiting: []string{"PUBSUB", "NUMSUB", "redisson_rwlock:{%s}"},
			after: func(t *testing.T, n string) {
				if z := redisCli(t, port, "ZCARD", "redlockc_rwlock_writers:{"+n+"}"); z != "0" {
					t.Fatalf("the cancelled writer's intent stayed (ZCARD %s)", z)
				}
				if !must(must(c.NewRWLock(n)).RLock(0, 10*time.Second)) {
					t.Fatal("a new reader was held back after the writer's wait ended")
				}
				if h := must(rwW.HoldCount(true)); h != 0 {
					t.Fatalf("write hold count %d", h)
				}
			},
		},
		"rw-read": {
			hold: func(n string) { must(must(c.NewRWLock(n)).Lock(0, 30*time.Second)) },
			wait: func(ctx context.Context, n string) error {
				rwR = must(c.NewRWLock(n))
				return rwR.RLockContext(ctx, 0)
			},
			waiting: []string{"PUBSUB", "NUMSUB", "redisson_rwlock:{%s}"},
			after: func(t *testing.T, n string) {
				if h := must(rwR.HoldCount(false)); h != 0 {
					t.Fatalf("read hold count %d", h)
				}
			},
		},
		"fair": {
			hold: func(n string) { must(must(c.NewFairLock(n, 0)).Lock(0, 30*time.Second)) },
			wait: func(ctx context.Context, n string) error {
				fair = must(c.NewFairLock(n, 0))
				return fair.LockContext(ctx, 0)
			},
			waiting: []string{"LLEN", "redisson_lock_queue:{%s}"},
			after: func(t *testing.T, n string) {
				if q := redisCli(t, port, "LLEN", "redisson_lock_queue:{"+n+"}"); q != "0" {
					t.Fatalf("the cancelled waiter stayed in the queue (LLEN %s)", q)
				}
				if h := must(fair.HoldCount()); h != 0 {
					t.Fatalf("hold count %d", h)
				}
			},
		},
		"semaphore": {
			hold: func(n string) { must(must(c.NewSemaphore(n, 1)).Acquire(1, 0)) },
			wait: func(ctx context.Context, n string) error {
				return must(c.NewSemaphore(n, 0)).AcquireContext(ctx, 1)
			},
			waiting: []string{"PUBSUB", "NUMSUB", "redisson_sc:{%s}"},
			after: func(t *testing.T, n string) {
				if v := redisCli(t, port, "GET", n); v != "0" {
					t.Fatalf("permits %s after the cancel, expected 0 (the holder's one out)", v)
				}
			},
		},
		"permit-semaphore": {
			hold: func(n string) { must(must(c.NewPermitSemaphore(n, 1)).Acquire(1, 0, 30*time.Second)) },
			wait: func(ctx context.Context, n string) error {
				_, err := must(c.NewPermitSemaphore(n, 0)).AcquireContext(ctx, 1, 30*time.Second)
				return err
			},
			waiting: []string{"PUBSUB", "NUMSUB", "redisson_sc:{%s}"},
			after: func(t *testing.T, n string) {
				if z := redisCli(t, port, "ZCARD", "{"+n+"}:timeout"); z != "1" {
					t.Fatalf("%s permits out after the cancel, expected the holder's 1", z)
				}
			},
		},
		"multi": {
			hold: func(n string) { must(newLock(t, c, n+"-b").TryLock()) },
			wait: func(ctx context.Context, n string) error {
				multi = must(c.NewMultiLock(n+"-a", n+"-b"))
				return multi.LockContext(ctx, 0)
			},
			waiting: []string{"PUBSUB", "NUMSUB", "redisson_lock__channel:{%s-b}"},
			after: func(t *testing.T, n string) {
				if e := redisCli(t, port, "EXISTS", n+"-a"); e != "0" {
					t.Fatal("the free name was kept")
				}
			},
		},
	}
	for what, k := range kinds {
		t.Run(what, func(t *testing.T) {
			n := famName(what)
			k.hold(n)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- k.wait(ctx, n) }()
			args := append([]string(nil), k.waiting...)
			args[len(args)-1] = fmt.Sprintf(args[len(args)-1], n)
			awaitTrue(t, "the waiter", famWaiting(t, port, args...))
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("expected context.Canceled, saw %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait went on 10 s after its context was cancelled")
			}
			k.after(t, n)
		})
	}
}

// A ...Context acquire gets what is free, and says DeadlineExceeded when it
// stayed busy until the context's deadline.
func TestFamilyContextAcquireAndDeadline(t *testing.T) {
	c := newClient(t, "")
	n := famName("ctx")
	a, b := must(c.NewRWLock(n)), must(c.NewRWLock(n))
	defer a.Close()
	defer b.Close()
	noErr(t, a.LockContext(context.Background(), 10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.RLockContext(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("busy until the deadline: %v, expected context.DeadlineExceeded", err)
	}
	noErr(t, a.Unlock())
	noErr(t, b.RLockContext(context.Background(), 0))
	noErr(t, b.RUnlock())
	s := must(c.NewPermitSemaphore(famName("ctx-p"), 1))
	defer s.Close()
	id, err := s.AcquireContext(context.Background(), 1, 10*time.Second)
	if err != nil || len(id) != 32 {
		t.Fatalf("permit: %q %v", id, err)
	}
	noErr(t, s.Release(id))
}
