package redlockc

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Explicit owner ids, unique in this process and never 0.
var nextOwner atomic.Uint64

// Lock is a distributed lock for one name, run by the client's engine. See
// the package comment for owners. Create it with Client.NewLock; Close it
// when done.
type Lock struct {
	name  string
	owner uint64
	lease time.Duration
	c     *Client
	turn  chan struct{} // one goroutine at a time holds this Lock value
	lost  chan error

	mu      sync.Mutex // guards holding, token, closed
	holding bool       // acquired and not released (it may be lost meanwhile)
	token   uint64
	closed  bool
}

// LockOption configures NewLock.
type LockOption func(*Lock)

// WithLease gives the lock a fixed lease (no watchdog): it expires lease
// after each acquisition unless released or extended. The default (0) lets
// the client's watchdog renew it until release.
func WithLease(lease time.Duration) LockOption {
	return func(l *Lock) { l.lease = lease }
}

// NewLock makes a Lock value (a new owner) for name. No network I/O.
func (c *Client) NewLock(name string, opts ...LockOption) (*Lock, error) {
	l := &Lock{name: name, owner: nextOwner.Add(1), c: c,
		turn: make(chan struct{}, 1), lost: make(chan error, 1)}
	for _, o := range opts {
		o(l)
	}
	if name == "" {
		return nil, errorf(StatusInvalid, "new lock", "the lock name is empty")
	}
	if err := c.d.do("new lock", func() {
		if c.d.closing {
			return
		}
		c.d.lost[l.owner] = l.lost
	}); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(l, (*Lock).Close)
	return l, nil
}

// Name is the lock's name (without the client's key_prefix).
func (l *Lock) Name() string { return l.name }

func (l *Lock) checkOpen(what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errorf(StatusClosed, what, "lock %q is closed", l.name)
	}
	return nil
}

// run starts an operation and waits for its end (not cancellable).
func (l *Lock) run(kind opKind, what string, a, b int64) (done, error) {
	if err := l.checkOpen(what); err != nil {
		return done{}, err
	}
	p, err := l.c.d.start(kind, what, l.name, l.owner, a, b)
	if err != nil {
		return done{}, err
	}
	r := l.c.d.wait(p)
	return r, statusError(what, r)
}

// statusError is nil for RLC_OK, else an *Error with the event's message.
func statusError(what string, r done) error {
	if r.status == StatusOK {
		return nil
	}
	return &Error{Status: r.status, Op: what, Detail: r.message}
}

// acquire waits for the lock at most wait (< 0 forever, 0 one try) or
// until ctx ends (then ctx.Err(); the engine cancels the wait).
func (l *Lock) acquire(ctx context.Context, wait time.Duration) error {
	if err := l.checkOpen("acquire"); err != nil {
		return err
	}
	w := int64(-1)
	if wait >= 0 {
		w = ms(wait)
	}
	lease := int64(0)
	if l.lease > 0 {
		lease = ms(l.lease)
	}
	p, err := l.c.d.start(opAcquire, "acquire", l.name, l.owner, w, lease)
	if err != nil {
		return err
	}
	var r done
	select {
	case r = <-p.ch:
	case <-ctx.Done():
		l.c.d.abandon(p)
		return ctx.Err()
	case <-l.c.d.dead:
		r = l.c.d.wait(p)
	}
	if err := statusError("acquire", r); err != nil {
		return err
	}
	l.mu.Lock()
	l.holding, l.token = true, r.token
	l.mu.Unlock()
	select { // a notice about an earlier hold is stale now
	case <-l.lost:
	default:
	}
	return nil
}

// Lock waits until the lock is held, or returns the library's failure
// (ErrConnect, ErrClosed...): it never panics. As LockContext with a
// context that never ends.
func (l *Lock) Lock() error { return l.LockContext(context.Background()) }

// TryLock tries once: true when held, false when busy. Unlike
// sync.Mutex.TryLock it also returns the library's failures.
func (l *Lock) TryLock() (bool, error) {
	select {
	case l.turn <- struct{}{}:
	default:
		return false, nil // another goroutine holds this Lock value
	}
	err := l.acquire(context.Background(), 0)
	if err == nil {
		return true, nil
	}
	<-l.turn
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	return false, err
}

// LockContext waits until the lock is held or ctx ends (then ctx.Err(), and
// nothing is kept: the wait is cancelled, and a grant that crossed the
// cancel is given back). The waiting goroutine takes no OS thread.
func (l *Lock) LockContext(ctx context.Context) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		<-l.turn
		return err
	}
	wait := time.Duration(-1) // forever: the context's end cancels it
	deadline, bounded := ctx.Deadline()
	if bounded {
		wait = time.Until(deadline)
		if wait < time.Millisecond { // the engine's wait has ms resolution
			<-l.turn
			return context.DeadlineExceeded
		}
	}
	err := l.acquire(ctx, wait)
	if err == nil {
		return nil
	}
	<-l.turn
	if bounded && errors.Is(err, ErrNotAcquired) {
		return context.DeadlineExceeded // busy until the deadline
	}
	return err
}

// Unlock releases the lock and returns what the library said: nil,
// ErrNotOwner (not held), ErrLost (its validity ran out or it was taken
// meanwhile: the hold is over either way), or an I/O error (ErrConnect,
// ErrTimeout...: the release stays queued in the engine and is delivered
// when the node answers again; until then the key expires with its lease,
// no longer renewed). Either way this Lock value is free again. It never
// panics.
func (l *Lock) Unlock() error { return l.Release() }

// Release is Unlock.
func (l *Lock) Release() error {
	if len(l.turn) == 0 { // like sync.Mutex, any goroutine may unlock a held value
		return errorf(StatusNotOwner, "release", "lock %q is not held by this Lock value", l.name)
	}
	_, err := l.run(opRelease, "release", 0, 0)
	l.mu.Lock()
	l.holding, l.token = false, 0
	l.mu.Unlock()
	<-l.turn
	return err
}

// Lost receives an ErrLost once the hold taken by the last successful
// acquisition is lost (buffered: one notice waits): when a fixed lease
// (WithLease, Extend) runs out before Release, at that moment, or when the
// watchdog can no longer renew it.
func (l *Lock) Lost() <-chan error { return l.lost }

// Extend sets a fixed lease from now, or with lease <= 0 hands the hold back
// to the watchdog.
func (l *Lock) Extend(lease time.Duration) error {
	v := int64(0)
	if lease > 0 {
		v = ms(lease)
	}
	_, err := l.run(opExtend, "extend", v, 0)
	return err
}

// ForceRelease deletes the lock whoever holds it, and wakes its waiters.
// It runs on the library's blocking API (one round trip on this goroutine's
// thread).
func (l *Lock) ForceRelease() error {
	if err := l.checkOpen("force release"); err != nil {
		return err
	}
	cname := C.CString(l.name)
	defer C.free(unsafe.Pointer(cname))
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	blk, err := l.c.blocking("force release")
	if err != nil {
		return err
	}
	return check("force release", C.rlcgo_force_release(blk, cname, C.size_t(len(l.name))))
}

// Locked says whether anyone holds the lock (on a quorum).
func (l *Lock) Locked() (bool, error) {
	r, err := l.run(opQuery, "is locked", C.RLC_Q_LOCKED, 0)
	return err == nil && r.count == 1, err
}

// Held says whether this Lock value holds it now: false once its validity
// has run out (a fixed lease that ended, a watchdog hold not renewed in
// time), then without asking the servers; else it asks a quorum.
func (l *Lock) Held() (bool, error) {
	v, err := l.Validity()
	if err != nil || v == 0 {
		return false, err
	}
	r, err := l.run(opQuery, "is held", C.RLC_Q_HELD, 0)
	return err == nil && r.count == 1, err
}

// HoldCount is this Lock value's level count: 1 while held (a Lock value is
// not reentrant), 0 when not held and once its validity has run out. No
// network I/O.
func (l *Lock) HoldCount() (int64, error) {
	if err := l.checkOpen("hold count"); err != nil {
		return 0, err
	}
	var n int64
	err := l.local("hold count", func(e *C.rlc_engine, name *C.char, size C.size_t) {
		n = int64(C.rlc_engine_hold_count(e, name, size, C.uint64_t(l.owner)))
	})
	return n, err
}

// Validity is how long the hold is certainly still held, at this call, from
// the client's monotonic clock: the lease, less the time since the acquire,
// renewal or extend a quorum confirmed, less the drift allowance. 0 when not
// held, lost, or run out. A healthy watchdog hold stays above about 2/3 of
// the watchdog timeout (it is renewed every third). No network I/O.
func (l *Lock) Validity() (time.Duration, error) {
	if err := l.checkOpen("validity"); err != nil {
		return 0, err
	}
	var v int64
	err := l.local("validity", func(e *C.rlc_engine, name *C.char, size C.size_t) {
		v = int64(C.rlc_engine_validity_ms(e, name, size, C.uint64_t(l.owner), C.int64_t(nowMs())))
	})
	return time.Duration(v) * time.Millisecond, err
}

// local runs one of the engine's local answers on the loop.
func (l *Lock) local(what string, f func(e *C.rlc_engine, name *C.char, size C.size_t)) error {
	b := []byte(l.name)
	return l.c.d.do(what, func() {
		f(l.c.d.e, (*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
	})
}

// FencingToken is the token of the current hold; it grows with each holder.
// It needs the client option WithFencing(true) (fencing=1): ErrInvalid
// without it, as no hold takes a token. ErrNotOwner when not held, ErrLost
// once its validity has run out. No network I/O.
func (l *Lock) FencingToken() (uint64, error) {
	if !l.c.d.fencing {
		return 0, errorf(StatusInvalid, "fencing token", "lock %q has no fencing token: fencing is off "+
			"(open the client with WithFencing(true), the option fencing=1)", l.name)
	}
	v, err := l.Validity()
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	holding, token := l.holding, l.token
	l.mu.Unlock()
	switch {
	case !holding:
		return 0, errorf(StatusNotOwner, "fencing token", "lock %q is not held by this Lock value", l.name)
	case v == 0:
		return 0, errorf(StatusLost, "fencing token", "the hold of %q was lost (its validity ran out)", l.name)
	}
	return token, nil
}

// Close ends this Lock value: a hold is not released on the server (it
// stops being renewed and expires), and calls then fail with ErrClosed.
// Idempotent.
func (l *Lock) Close() error {
	runtime.SetFinalizer(l, nil)
	l.mu.Lock()
	was := l.closed
	l.closed = true
	l.mu.Unlock()
	if was {
		return nil
	}
	b := []byte(l.name)
	_ = l.c.d.do("close", func() {
		delete(l.c.d.lost, l.owner)
		delete(l.c.d.holds, holdKey{l.name, l.owner})
		if !l.c.d.closing {
			C.rlc_engine_forget(l.c.d.e, (*C.char)(unsafe.Pointer(&b[0])), C.size_t(len(b)),
				C.uint64_t(l.owner), C.int64_t(nowMs()))
		}
	})
	return nil
}
