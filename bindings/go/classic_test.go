package redlockc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// WithFormat(FormatClassic): the lock is the string key redsync and
// node-redlock keep (a SET NX PX value), without fencing. (A Lock value is
// one owner, as a sync.Mutex: it never nests, in either format.)

func redisCli(t *testing.T, port int, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-p", fmt.Sprint(port), "--raw"}, args...)...).Output()
	if err != nil {
		t.Fatalf("redis-cli %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func TestClassicFormatKeepsAString(t *testing.T) {
	port := freshServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, fmt.Sprintf("redis://127.0.0.1:%d", port), WithFormat(FormatClassic))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	l := newLock(t, c, "orders")
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if typ := redisCli(t, port, "TYPE", "orders"); typ != "string" {
		t.Fatalf("TYPE orders: expected string, saw %q", typ)
	}
	if v := redisCli(t, port, "GET", "orders"); !strings.Contains(v, ":") {
		t.Fatalf("GET orders: expected an attempt id <uuid>:<n>, saw %q", v)
	}
	other := newLock(t, c, "orders")
	if ok, err := other.TryLock(); ok || err != nil {
		t.Fatalf("another Lock of the name: expected busy, saw (%v, %v)", ok, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if keys := serverKeys(t, port); len(keys) != 0 {
		t.Fatalf("keys left after release: %q", keys)
	}
	if _, err := New(ctx, fmt.Sprintf("redis://127.0.0.1:%d", port), WithFormat(FormatClassic),
		WithFencing(true)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("classic with fencing: expected ErrInvalid, saw %v", err)
	}
}
