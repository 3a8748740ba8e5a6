package redlockc

// #include <stdlib.h>
// #include "shim.h"
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

// Explicit owner ids, unique in this process and never 0 (0 = "the calling
// thread", meaningless for goroutines). Also the id of the lost notices.
var nextOwner atomic.Uint64

// cancelAgain: how often a context that ended cancels the wait again, until
// the C call has returned (see cancelOnDone).
const cancelAgain = 20 * time.Millisecond

// Lock is a distributed lock (sync.Locker) for one name. See the package
// comment for owners. Create it with Client.NewLock; Close it when done.
type Lock struct {
	name  string
	owner uint64
	lease time.Duration
	c     *Client
	turn  chan struct{} // one goroutine at a time holds this Lock value
	lost  chan error

	mu      sync.Mutex // guards handle, calls, closing
	handle  *C.rlc_lock
	calls   int // C calls in flight: the handle is freed after the last
	closing bool
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
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	c.mu.Lock() // not while Close frees the client
	if c.handle == nil {
		c.mu.Unlock()
		return nil, errorf(StatusClosed, "new lock", "the client is closed")
	}
	lostChannels.Store(uintptr(l.owner), l.lost)
	r := C.rlcgo_lock_new(c.handle, cname, C.uint64_t(l.owner), C.uintptr_t(l.owner), &l.handle)
	c.mu.Unlock()
	if err := check("new lock", r); err != nil {
		lostChannels.Delete(uintptr(l.owner))
		return nil, err
	}
	runtime.SetFinalizer(l, (*Lock).Close)
	return l, nil
}

// Name is the lock's name (without the client's key_prefix).
func (l *Lock) Name() string { return l.name }

// call runs one library call with the handle kept alive meanwhile.
func (l *Lock) call(op C.int, name string, a, b int64) (int64, error) {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		return 0, errorf(StatusClosed, name, "lock %q is closed", l.name)
	}
	l.calls++
	h := l.handle
	l.mu.Unlock()
	r := C.rlcgo_call(op, h, C.int64_t(a), C.int64_t(b))
	l.mu.Lock()
	l.calls--
	l.freeIfDone()
	l.mu.Unlock()
	return int64(r.value), check(name, r)
}

// acquire: wait < 0 waits forever (Lock), 0 tries once.
func (l *Lock) acquire(wait time.Duration) error {
	w := int64(-1)
	if wait >= 0 {
		w = int64((wait + time.Millisecond - 1) / time.Millisecond)
	}
	lease := int64((l.lease + time.Millisecond - 1) / time.Millisecond)
	_, err := l.call(C.RLCGO_ACQUIRE, "acquire", w, lease)
	if err == nil {
		select { // a notice about an earlier hold is stale now
		case <-l.lost:
		default:
		}
	}
	return err
}

// Lock waits until the lock is held (sync.Locker). It panics with an *Error
// if the library fails (connection, auth...); use LockContext to get it.
func (l *Lock) Lock() {
	l.turn <- struct{}{}
	if err := l.acquire(-1); err != nil {
		<-l.turn
		panic(err)
	}
}

// TryLock tries once: true when held, false when busy. Unlike
// sync.Mutex.TryLock it also returns the library's failures.
func (l *Lock) TryLock() (bool, error) {
	select {
	case l.turn <- struct{}{}:
	default:
		return false, nil // another goroutine holds this Lock value
	}
	err := l.acquire(0)
	if err == nil {
		return true, nil
	}
	<-l.turn
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	return false, err
}

// LockContext waits until the lock is held or ctx ends (then ctx.Err()).
// The wait is one library call; when ctx ends, a goroutine cancels it
// (rlc_lock_cancel), so it returns at once with nothing kept.
func (l *Lock) LockContext(ctx context.Context) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		if err := ctx.Err(); err != nil {
			<-l.turn
			return err
		}
		wait := time.Duration(-1) // forever: the context's end cancels it
		if deadline, ok := ctx.Deadline(); ok {
			wait = time.Until(deadline)
			if wait < time.Millisecond { // the C wait has ms resolution
				<-l.turn
				return context.DeadlineExceeded
			}
		}
		stop := l.cancelOnDone(ctx)
		err := l.acquire(wait)
		stop()
		if err == nil {
			return nil
		}
		// Busy until the deadline, or cancelled: the loop's top says which
		// (a deadline's timer may fire a moment after the C wait ended).
		if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrCanceled) {
			<-l.turn
			return err
		}
	}
}

// cancelOnDone cancels the running acquire once ctx ends. rlc_lock_cancel
// spares an acquire that has not started yet, and ctx may end just before
// the C call starts: so it cancels again every cancelAgain until stop. No
// cancel runs after stop returns, so none can reach a later acquire.
func (l *Lock) cancelOnDone(ctx context.Context) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-quit:
			return
		case <-ctx.Done():
		}
		tick := time.NewTicker(cancelAgain)
		defer tick.Stop()
		for {
			_, _ = l.call(C.RLCGO_CANCEL, "cancel", 0, 0)
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// Unlock releases the lock (sync.Locker). A hold found lost is not an error
// here (Lost and Release report it); any other failure panics, as unlocking
// an unlocked sync.Mutex does. Use Release to get errors instead.
func (l *Lock) Unlock() {
	if err := l.Release(); err != nil && !errors.Is(err, ErrLost) {
		panic(err)
	}
}

// Release releases the lock and returns what the library said: nil,
// ErrNotOwner (not held), ErrLost (it expired or was taken meanwhile), or an
// I/O error (then the lock is still held by this Lock value: retry).
func (l *Lock) Release() error {
	if len(l.turn) == 0 { // like sync.Mutex, any goroutine may unlock a held value
		return errorf(StatusNotOwner, "release", "lock %q is not held by this Lock value", l.name)
	}
	_, err := l.call(C.RLCGO_RELEASE, "release", 0, 0)
	if err == nil || errors.Is(err, ErrLost) || errors.Is(err, ErrNotOwner) || errors.Is(err, ErrClosed) {
		<-l.turn
	}
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
	ms := int64(0)
	if lease > 0 {
		ms = int64((lease + time.Millisecond - 1) / time.Millisecond)
	}
	_, err := l.call(C.RLCGO_EXTEND, "extend", ms, 0)
	return err
}

// ForceRelease deletes the lock whoever holds it, and wakes its waiters.
func (l *Lock) ForceRelease() error {
	_, err := l.call(C.RLCGO_FORCE_RELEASE, "force release", 0, 0)
	return err
}

// Locked says whether anyone holds the lock (on a quorum).
func (l *Lock) Locked() (bool, error) {
	v, err := l.call(C.RLCGO_IS_LOCKED, "is locked", 0, 0)
	return v == 1, err
}

// Held says whether this Lock value holds it now: false once its validity
// has run out (a fixed lease that ended, a watchdog hold not renewed in
// time), then without asking the servers; else it asks a quorum.
func (l *Lock) Held() (bool, error) {
	v, err := l.call(C.RLCGO_IS_HELD, "is held", 0, 0)
	return v == 1, err
}

// HoldCount is this Lock value's level count on the server: 1 while held (a
// Lock value is not reentrant), 0 when not held and once its validity has
// run out.
func (l *Lock) HoldCount() (int64, error) {
	return l.call(C.RLCGO_HOLD_COUNT, "hold count", 0, 0)
}

// Validity is how long the hold is certainly still held, at this call, from
// the client's monotonic clock: the lease, less the time since the acquire,
// renewal or extend a quorum confirmed, less the drift allowance. 0 when not
// held, lost, or run out. A healthy watchdog hold stays above about 2/3 of
// the watchdog timeout (it is renewed every third). No network I/O.
func (l *Lock) Validity() (time.Duration, error) {
	v, err := l.call(C.RLCGO_VALIDITY, "validity", 0, 0)
	return time.Duration(v) * time.Millisecond, err
}

// FencingToken is the token of the current hold; it grows with each holder.
// ErrNotOwner when not held, ErrLost once its validity has run out. No
// network I/O.
func (l *Lock) FencingToken() (uint64, error) {
	v, err := l.call(C.RLCGO_FENCING_TOKEN, "fencing token", 0, 0)
	return uint64(v), err
}

// Close frees the handle once no call is in flight. A hold is not released
// on the server: it stops being renewed and expires. Idempotent.
func (l *Lock) Close() error {
	runtime.SetFinalizer(l, nil)
	l.mu.Lock()
	l.closing = true
	l.freeIfDone()
	l.mu.Unlock()
	return nil
}

// Under l.mu. After rlc_lock_free no lost notice can come, so the channel
// entry goes with it.
func (l *Lock) freeIfDone() {
	if l.closing && l.calls == 0 && l.handle != nil {
		C.rlc_lock_free(l.handle)
		l.handle = nil
		lostChannels.Delete(uintptr(l.owner))
	}
}
