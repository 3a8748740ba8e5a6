package redlockc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections to the test's redis-server, so a test can
// cut them or stop answering (the server itself is shared by the package).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startProxy(t *testing.T) *proxy {
	t.Helper()
	u, err := url.Parse(server(t))
	if err != nil {
		t.Fatalf("RLC_TEST_REDIS: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &proxy{ln: ln, target: u.Host}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) uri() string { return "redis://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// cut closes the connections made so far; new ones are still forwarded.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// stop closes the listener and every connection: the node is down.
func (p *proxy) stop() {
	p.ln.Close()
	p.wg.Wait()
	p.cut()
}

// redisDo sends one command to the test's server and returns its reply line.
func redisDo(t *testing.T, args ...string) string {
	t.Helper()
	u, _ := url.Parse(server(t))
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("dial redis: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cmd := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		cmd += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(cmd)); err != nil {
		t.Fatalf("write: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimSpace(line)
}

// Lock and Unlock return the library's failures, as redsync does: with the
// node gone, neither panics (both did before: Lock panicked with the
// connection error, Unlock with its release's).
func TestLockAndUnlockReturnErrorsInsteadOfPanicking(t *testing.T) {
	p := startProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, p.uri(), WithConnectTimeout(200*time.Millisecond), WithIOTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	n := name(t)
	held, other := newLock(t, c, n), newLock(t, c, n+"-other")
	if err := held.Lock(); err != nil {
		t.Fatalf("Lock with the node up: %v", err)
	}
	p.stop()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panicked with the node down: %v", r)
		}
	}()
	start := time.Now()
	err = other.Lock()
	if err == nil || !(errors.Is(err, ErrConnect) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoQuorum)) {
		t.Fatalf("Lock with the node down: expected a connection error, saw %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Lock with the node down took %v (connect timeout 200 ms, I/O timeout 300 ms)", took)
	}
	t.Logf("Lock with the node down: %v (%v)", err, time.Since(start))
	err = held.Unlock()
	t.Logf("Unlock with the node down: %v", err)
	if err == nil || !(errors.Is(err, ErrConnect) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoQuorum)) {
		t.Fatalf("Unlock with the node down: expected a connection error, saw %v", err)
	}
}

// Typed options reach the library: the watchdog timeout bounds a hold's
// validity, the key prefix names the key in Redis, and a value out of range
// is an ErrInvalid that names the option.
func TestTypedOptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("go-prefix-%d:", time.Now().UnixNano())
	c, err := New(ctx, server(t), WithWatchdogTimeout(900*time.Millisecond), WithKeyPrefix(prefix),
		WithIOTimeout(2*time.Second), WithDriftFactor(0.02), WithLossPush(true))
	if err != nil {
		t.Fatalf("New with typed options: %v", err)
	}
	defer c.Close()
	l := newLock(t, c, "orders")
	if err := l.Lock(); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if v, err := l.Validity(); err != nil || v <= 0 || v > 900*time.Millisecond {
		t.Fatalf("Validity with a 900 ms watchdog: expected (0, 900 ms], saw %v (%v)", v, err)
	}
	if got := redisDo(t, "EXISTS", prefix+"orders"); got != ":1" {
		t.Fatalf("EXISTS %sorders while held: expected :1, saw %s", prefix, got)
	}
	if err := l.Unlock(); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	for _, bad := range []struct {
		opt  Option
		name string
	}{
		{WithIOTimeout(0), "io_timeout_ms"},
		{WithDriftFactor(0.9), "drift_factor"},
		{WithWatchdogTimeout(time.Millisecond), "watchdog_timeout_ms"},
		{WithKeyPrefix("a;b"), "key_prefix"},
		{WithOptions("no_such_option=1"), "no_such_option"},
	} {
		_, err := New(ctx, server(t), bad.opt)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.name) {
			t.Errorf("option %s out of range: expected ErrInvalid naming it, saw %v", bad.name, err)
		}
	}
}

// New checks that the nodes answer: a port nobody listens on is an error
// within the connect timeout, not a client that fails later.
func TestNewFailsWhenNoNodeAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, "redis://"+addr, WithConnectTimeout(200*time.Millisecond))
	if err == nil {
		c.Close()
		t.Fatal("New with no server: expected an error")
	}
	if !errors.Is(err, ErrConnect) && !errors.Is(err, ErrNoQuorum) && !errors.Is(err, ErrTimeout) {
		t.Fatalf("New with no server: expected a connection error, saw %v", err)
	}
	t.Logf("New with no server: %v", err)
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("the error does not name the node %s: %v", addr, err)
	}
}

// The log hook gets the engine's lines (rlc_engine_next_log): a command
// connection made again is "reconnecting to <node>", at LogInfo.
func TestLoggerGetsTheEnginesLines(t *testing.T) {
	p := startProxy(t)
	lines := make(chan string, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := New(ctx, p.uri(), WithLogger(func(level LogLevel, msg string) {
		lines <- level.String() + ": " + msg
	}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer c.Close()
	l := newLock(t, c, name(t))
	if ok, err := l.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock: (%v, %v)", ok, err)
	}
	p.cut() // the node closes the connection; the release makes it again
	// The release may meet the closed connection (ErrConnect): it stays
	// queued in the engine and goes out on the next connection (E4).
	if err := l.Unlock(); err != nil && !errors.Is(err, ErrConnect) {
		t.Fatalf("Unlock after the cut: %v", err)
	}
	if n, err := l.HoldCount(); n != 0 || err != nil {
		t.Fatalf("HoldCount after Unlock: expected (0, nil), saw (%d, %v)", n, err)
	}
	waitUntil(t, 10*time.Second, "the lock released on the server", func() bool {
		locked, err := l.Locked()
		return err == nil && !locked
	})
	want := "info: reconnecting to " + strings.TrimPrefix(p.uri(), "redis://")
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-lines:
			if strings.HasPrefix(line, want) {
				return
			}
			t.Logf("log: %s", line)
		case <-deadline:
			t.Fatalf("no %q line within 10 s", want)
		}
	}
}
