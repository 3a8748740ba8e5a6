// Package redlockc is a Go binding of libredlockc: Redisson-compatible
// reentrant locks kept alive by a watchdog, and Redlock over N Redis nodes.
//
//	c, err := redlockc.NewClient("redis://127.0.0.1:6379", "")
//	l, err := c.NewLock("orders")
//	l.Lock()           // sync.Locker: waits, panics on a connection error
//	defer l.Unlock()
//
// Owners: goroutines move between OS threads, so the library's per-thread
// owner means nothing in Go. Each Lock value is an explicit owner of its own,
// and goroutines sharing one Lock value take turns on it locally (like a
// sync.Mutex, not reentrant), so a Lock value held by one goroutine is never
// "held" by another. Two Lock values of one name exclude each other through
// Redis, as two processes do.
//
// Every call blocks its goroutine (and the OS thread under it) for at most
// the wait it was given plus the client's I/O timeouts.
package redlockc

/*
#cgo pkg-config: redlockc
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Version is the library's version ("1.0.0").
func Version() string { return C.GoString(C.rlc_version()) }

// Client is a set of connections to one node (single-instance locks) or to
// N >= 2 independent masters (Redlock). Safe for concurrent use.
type Client struct {
	mu     sync.Mutex
	handle *C.rlc_client
}

// NewClient connects lazily to nodes ("redis://[user:pass@]host:port[/db]",
// comma-separated for Redlock) with options "name=value;..." as in
// redlockc.h ("" for the defaults).
func NewClient(nodes, options string) (*Client, error) {
	cnodes := C.CString(nodes)
	defer C.free(unsafe.Pointer(cnodes))
	var copts *C.char
	if options != "" {
		copts = C.CString(options)
		defer C.free(unsafe.Pointer(copts))
	}
	c := &Client{}
	if err := check("new client", C.rlcgo_client_new(cnodes, copts, &c.handle)); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(c, (*Client).Close)
	return c, nil
}

// UUID is the client's id, the first half of every hash field it writes.
func (c *Client) UUID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.handle == nil {
		return ""
	}
	return C.GoString(C.rlc_client_uuid(c.handle))
}

// Close stops the watchdog and closes the connections. Locks still held are
// not released on the server (they expire with their lease); calls on this
// client's Lock values then fail with ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	h := c.handle
	c.handle = nil
	c.mu.Unlock()
	if h != nil {
		runtime.SetFinalizer(c, nil)
		C.rlc_client_free(h)
	}
	return nil
}
