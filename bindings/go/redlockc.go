// Package redlockc is a Go binding of libredlockc: Redisson-compatible
// reentrant locks kept alive by a watchdog, and Redlock over N Redis nodes.
//
//	c, err := redlockc.New(ctx, "redis://127.0.0.1:6379",
//		redlockc.WithWatchdogTimeout(10*time.Second))
//	l, err := c.NewLock("orders")
//	if err := l.LockContext(ctx); err != nil { ... }
//	defer l.Unlock()
//
// The library's engine (its lock protocol without I/O) runs in Go: one
// goroutine per client owns it, with a net.Conn per connection, so a
// goroutine that waits for a lock waits on a channel, never in a cgo call,
// and a thousand waiting goroutines take no OS thread.
//
// Owners: each Lock value is an explicit owner of its own, and goroutines
// sharing one Lock value take turns on it locally (like a sync.Mutex, not
// reentrant), so a Lock value held by one goroutine is never "held" by
// another. Two Lock values of one name exclude each other through Redis, as
// two processes do.
//
// Failures are errors (*Error; errors.Is against ErrLost, ErrConnect...):
// no call panics on a library failure.
package redlockc

/*
#cgo pkg-config: redlockc
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Version is the library's version (rlc_version()).
func Version() string { return C.GoString(C.rlc_version()) }

// Client is a set of connections to one node (single-instance locks) or to
// N >= 2 independent masters (Redlock). Safe for concurrent use.
type Client struct {
	d       *driver
	nodes   string
	options string

	mu     sync.Mutex // guards blk, closed
	blk    *C.rlc_client
	closed bool
}

// New makes a client of nodes ("redis://[user:pass@]host:port[/db]",
// rediss:// for TLS, comma-separated for Redlock; redis-sentinel:// and
// redis-cluster:// as in the main README) and checks that a quorum of them
// answers before ctx ends: an unreachable node, a refused password or a bad
// certificate is an error here, not at the first lock.
func New(ctx context.Context, nodes string, opts ...Option) (*Client, error) {
	c, err := makeClient(nodes, opts)
	if err != nil {
		return nil, err
	}
	if err := c.ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// NewClient makes a client with the options in the library's own form,
// "name=value;..." ("" for the defaults), without a round trip: it connects
// at the first call that needs a node.
func NewClient(nodes, options string) (*Client, error) {
	return makeClient(nodes, []Option{WithOptions(options)})
}

func makeClient(nodes string, opts []Option) (*Client, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(nodes, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{d: d, nodes: nodes, options: cfg.String()}
	runtime.SetFinalizer(c, func(c *Client) { go c.Close() })
	return c, nil
}

// ping asks a quorum whether a lock exists (a name nobody uses).
func (c *Client) ping(ctx context.Context) error {
	p, err := c.d.start(opQuery, "connect", "redlockc:ping", nextOwner.Add(1), C.RLC_Q_LOCKED, 0)
	if err != nil {
		return err
	}
	select {
	case r := <-p.ch:
		r.message = strings.Replace(r.message, " (lock 'redlockc:ping')", "", 1)
		return statusError("connect", r)
	case <-ctx.Done():
		return ctx.Err()
	case <-c.d.dead:
		return errorf(StatusClosed, "connect", "the client is closed")
	}
}

// UUID is the client's id, the first half of every hash field its Lock
// values write.
func (c *Client) UUID() string { return c.d.uuid }

// blocking is the library's blocking client, made at the first call that
// needs it (the lock family, ForceRelease, FencedSet). Under c.mu.
func (c *Client) blocking(what string) (*C.rlc_client, error) {
	if c.closed {
		return nil, errorf(StatusClosed, what, "the client is closed")
	}
	if c.blk != nil {
		return c.blk, nil
	}
	cnodes, copts := C.CString(c.nodes), C.CString(c.options)
	defer C.free(unsafe.Pointer(cnodes))
	defer C.free(unsafe.Pointer(copts))
	if err := check(what, C.rlcgo_client_new(cnodes, copts, &c.blk)); err != nil {
		c.blk = nil
		return nil, err
	}
	return c.blk, nil
}

// closeBound is how long Close lets releases in flight finish.
const closeBound = 2 * time.Second

// Close cancels the waiting acquisitions (they return ErrClosed), lets
// releases in flight finish (at most 2 s), and closes the connections.
// Locks still held are not released on the server (they expire with their
// lease); calls on this client's values then fail with ErrClosed.
// Idempotent.
func (c *Client) Close() error {
	runtime.SetFinalizer(c, nil)
	c.d.close(closeBound)
	c.mu.Lock()
	blk := c.blk
	c.blk, c.closed = nil, true
	c.mu.Unlock()
	if blk != nil {
		C.rlc_client_free(blk)
	}
	return nil
}
