package redlockc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// The client option fencing: off by default, a released lock leaves no key
// on the server and FencingToken returns ErrInvalid; on, each hold takes a
// token from the counter redisson_lock_token:{name}, the one key per name
// that stays. Each test has a redis-server of its own, to count every key.

var fencingNames = []string{"orders", "accounts", "jobs:7"}

// freshServer starts a plain redis-server on a free port; its port. Stopped
// by its pid at the test's end.
func freshServer(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	return ownServer(t, func(port int) []string {
		return []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir}
	})
}

// serverKeys is KEYS * of the server on port, sorted.
func serverKeys(t *testing.T, port int) []string {
	t.Helper()
	out, err := exec.Command("redis-cli", "-p", fmt.Sprint(port), "--raw", "KEYS", "*").Output()
	if err != nil {
		t.Fatalf("redis-cli KEYS: %v", err)
	}
	keys := []string{}
	for _, k := range strings.Split(string(out), "\n") {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// lockAndUnlock takes and releases each name; check runs while it is held.
func lockAndUnlock(t *testing.T, c *Client, check func(l *Lock)) {
	t.Helper()
	for _, n := range fencingNames {
		l := newLock(t, c, n)
		if err := l.Lock(); err != nil {
			t.Fatalf("Lock(%q): %v", n, err)
		}
		check(l)
		if err := l.Unlock(); err != nil {
			t.Fatalf("Unlock(%q): %v", n, err)
		}
	}
}

func TestByDefaultNoKeyIsLeftAndThereIsNoToken(t *testing.T) {
	port := freshServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, fmt.Sprintf("redis://127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	lockAndUnlock(t, c, func(l *Lock) {
		tok, err := l.FencingToken()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "fencing is off") ||
			!strings.Contains(err.Error(), "WithFencing(true)") || !strings.Contains(err.Error(), l.Name()) {
			t.Fatalf("FencingToken without fencing: expected ErrInvalid naming the option and the lock, saw (%d, %v)", tok, err)
		}
	})
	if keys := serverKeys(t, port); len(keys) != 0 {
		t.Fatalf("keys left after release: %q", keys)
	}
}

func TestWithFencingOneCounterKeyPerNameStays(t *testing.T) {
	port := freshServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, fmt.Sprintf("redis://127.0.0.1:%d", port), WithFencing(true))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	lockAndUnlock(t, c, func(l *Lock) {
		if tok, err := l.FencingToken(); err != nil || tok == 0 {
			t.Fatalf("FencingToken with fencing: expected a token > 0, saw (%d, %v)", tok, err)
		}
	})
	want := []string{}
	for _, n := range fencingNames {
		want = append(want, "redisson_lock_token:{"+n+"}")
	}
	sort.Strings(want)
	if keys := serverKeys(t, port); !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys after release: expected %q, saw %q", want, keys)
	}
}
