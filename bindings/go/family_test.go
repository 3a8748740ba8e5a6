package redlockc

import (
	"errors"
	"fmt"
	"regexp"
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
