package redlockc

// The lock family (REDLOCKC_1.1, docs/FAMILY.md): RWLock, FairLock,
// Semaphore, PermitSemaphore, MultiLock, made by the client. Each owner-bound
// value is one explicit owner (reentrant through that value; two values of
// one name exclude each other), so give each goroutine its own value, as
// with Lock. Waits and leases are time.Durations: wait < 0 waits forever, 0
// tries once; lease 0 lets the watchdog renew the hold until release. A wait
// that runs out is (false, nil), not an error; failures are *Error.
//
// The family is not an engine operation yet: it runs on the library's
// blocking API (a client of its own, made at the first family call), so a
// waiting call blocks its goroutine and the OS thread under it for at most
// its wait plus the I/O timeouts. The ...Context acquires (LockContext,
// RLockContext, AcquireContext) wait until ctx ends instead: its end
// cancels the library's wait (rlc_rwlock_cancel etc.) and nothing is kept,
// as for Lock.LockContext. A fair waiter keeps its place in the queue only
// inside one call.

/*
#include <stdio.h>
#include <stdlib.h>
#include "shim.h"

enum {
    FGO_RW_READ_ACQUIRE = 1, FGO_RW_READ_RELEASE, FGO_RW_WRITE_ACQUIRE, FGO_RW_WRITE_RELEASE,
    FGO_RW_MODE, FGO_RW_READ_COUNT, FGO_RW_WRITE_COUNT,
    FGO_FAIR_ACQUIRE, FGO_FAIR_RELEASE, FGO_FAIR_COUNT,
    FGO_SEM_SET, FGO_SEM_AVAILABLE, FGO_SEM_ACQUIRE, FGO_SEM_RELEASE,
    FGO_PSEM_SET, FGO_PSEM_AVAILABLE, FGO_PSEM_ACQUIRE, FGO_PSEM_RELEASE,
    FGO_MULTI_ACQUIRE, FGO_MULTI_RELEASE, FGO_MULTI_SIZE
};
enum { FGO_RW, FGO_FAIR, FGO_SEM, FGO_PSEM, FGO_MULTI };

// The call and rlc_errmsg() in one cgo call, on one OS thread. A permit id
// comes back in msg with RLC_OK.
static struct rlcgo_result rlcgo_fcall(int op, void *h, int64_t a, int64_t b, int64_t c,
                                       const char *s)
{
    struct rlcgo_result r = {0};
    int v = 0;
    char id[RLC_PERMIT_ID_LEN + 1] = "";
    switch (op) {
    case FGO_RW_READ_ACQUIRE: r.rc = rlc_rwlock_read_acquire(h, a, b); break;
    case FGO_RW_READ_RELEASE: r.rc = rlc_rwlock_read_release(h); break;
    case FGO_RW_WRITE_ACQUIRE: r.rc = rlc_rwlock_write_acquire(h, a, b); break;
    case FGO_RW_WRITE_RELEASE: r.rc = rlc_rwlock_write_release(h); break;
    case FGO_RW_MODE: r.rc = rlc_rwlock_mode(h, &v); r.value = v; break;
    case FGO_RW_READ_COUNT: r.rc = rlc_rwlock_hold_count(h, 0, &r.value); break;
    case FGO_RW_WRITE_COUNT: r.rc = rlc_rwlock_hold_count(h, 1, &r.value); break;
    case FGO_FAIR_ACQUIRE: r.rc = rlc_fairlock_acquire(h, a, b); break;
    case FGO_FAIR_RELEASE: r.rc = rlc_fairlock_release(h); break;
    case FGO_FAIR_COUNT: r.rc = rlc_fairlock_hold_count(h, &r.value); break;
    case FGO_SEM_SET: r.rc = rlc_semaphore_try_set_permits(h, a, &v); r.value = v; break;
    case FGO_SEM_AVAILABLE: r.rc = rlc_semaphore_available(h, &r.value); break;
    case FGO_SEM_ACQUIRE: r.rc = rlc_semaphore_acquire(h, a, b); break;
    case FGO_SEM_RELEASE: r.rc = rlc_semaphore_release(h, a); break;
    case FGO_PSEM_SET: r.rc = rlc_psemaphore_try_set_permits(h, a, &v); r.value = v; break;
    case FGO_PSEM_AVAILABLE: r.rc = rlc_psemaphore_available(h, &r.value); break;
    case FGO_PSEM_ACQUIRE: r.rc = rlc_psemaphore_acquire(h, a, b, c, id); break;
    case FGO_PSEM_RELEASE: r.rc = rlc_psemaphore_release(h, s); break;
    case FGO_MULTI_ACQUIRE: r.rc = rlc_multilock_acquire(h, a, b); break;
    case FGO_MULTI_RELEASE: r.rc = rlc_multilock_release(h); break;
    case FGO_MULTI_SIZE: r.rc = rlc_multilock_size(h, &v); r.value = v; break;
    default: r.rc = RLC_E_INVAL; snprintf(r.msg, sizeof r.msg, "unknown op %d", op); return r;
    }
    if (r.rc < 0)
        snprintf(r.msg, sizeof r.msg, "%s", rlc_errmsg());
    else if (op == FGO_PSEM_ACQUIRE && r.rc == RLC_OK)
        snprintf(r.msg, sizeof r.msg, "%s", id);
    return r;
}

static struct rlcgo_result rlcgo_fnew(int kind, rlc_client *c, const char *name, uint64_t owner,
                                      int64_t tw, const char **names, int n, void **out)
{
    struct rlcgo_result r = {0};
    switch (kind) {
    case FGO_RW: r.rc = rlc_rwlock_new(c, name, owner, (rlc_rwlock **)out); break;
    case FGO_FAIR: r.rc = rlc_fairlock_new(c, name, owner, tw, (rlc_fairlock **)out); break;
    case FGO_SEM: r.rc = rlc_semaphore_new(c, name, (rlc_semaphore **)out); break;
    case FGO_PSEM: r.rc = rlc_psemaphore_new(c, name, (rlc_psemaphore **)out); break;
    case FGO_MULTI: r.rc = rlc_multilock_new(c, names, n, owner, (rlc_multilock **)out); break;
    default: r.rc = RLC_E_INVAL; break;
    }
    if (r.rc < 0)
        snprintf(r.msg, sizeof r.msg, "%s", rlc_errmsg());
    return r;
}

// Ends the acquires waiting on h in other threads (RLC_E_CANCELED). No I/O.
static int rlcgo_fcancel(int kind, void *h)
{
    switch (kind) {
    case FGO_RW: return rlc_rwlock_cancel(h);
    case FGO_FAIR: return rlc_fairlock_cancel(h);
    case FGO_SEM: return rlc_semaphore_cancel(h);
    case FGO_PSEM: return rlc_psemaphore_cancel(h);
    case FGO_MULTI: return rlc_multilock_cancel(h);
    }
    return RLC_E_INVAL;
}

static void rlcgo_ffree(int kind, void *h)
{
    switch (kind) {
    case FGO_RW: rlc_rwlock_free(h); break;
    case FGO_FAIR: rlc_fairlock_free(h); break;
    case FGO_SEM: rlc_semaphore_free(h); break;
    case FGO_PSEM: rlc_psemaphore_free(h); break;
    case FGO_MULTI: rlc_multilock_free(h); break;
    }
}
*/
import "C"

import (
	"context"
	"runtime"
	"sort"
	"sync"
	"time"
	"unsafe"
)

// fhandle is a C family handle shared by the family's types: calls keep it
// alive; Close frees it after the last call in flight.
type fhandle struct {
	kind    C.int
	name    string
	c       *Client
	mu      sync.Mutex
	h       unsafe.Pointer
	calls   int
	closing bool
}

func newFamily(c *Client, kind C.int, name string, owner uint64, tw int64, names []string) (*fhandle, error) {
	f := &fhandle{kind: kind, name: name, c: c}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var cnames **C.char
	if names != nil {
		cnames = (**C.char)(C.malloc(C.size_t(len(names)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		defer C.free(unsafe.Pointer(cnames))
		v := unsafe.Slice(cnames, len(names))
		for i, n := range names {
			v[i] = C.CString(n)
			defer C.free(unsafe.Pointer(v[i]))
		}
	}
	c.mu.Lock() // not while Close frees the client
	blk, err := c.blocking("new " + name)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	r := C.rlcgo_fnew(kind, blk, cname, C.uint64_t(owner), C.int64_t(tw), cnames,
		C.int(len(names)), &f.h)
	c.mu.Unlock()
	if err := check("new", r); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(f, (*fhandle).Close)
	return f, nil
}

// call runs one family call: (value, msg, status); err for a failure (not
// for RLC_NOT_ACQUIRED).
func (f *fhandle) call(op C.int, what string, a, b, c int64, s string) (int64, string, bool, error) {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return 0, "", false, errorf(StatusClosed, what, "%q is closed", f.name)
	}
	f.calls++
	h := f.h
	f.mu.Unlock()
	var cs *C.char
	if s != "" {
		cs = C.CString(s)
		defer C.free(unsafe.Pointer(cs))
	}
	r := C.rlcgo_fcall(op, h, C.int64_t(a), C.int64_t(b), C.int64_t(c), cs)
	f.mu.Lock()
	f.calls--
	f.freeIfDone()
	f.mu.Unlock()
	switch {
	case r.rc == 0:
		return int64(r.value), C.GoString(&r.msg[0]), true, nil
	case r.rc == C.RLC_NOT_ACQUIRED:
		return 0, "", false, nil
	default:
		return 0, "", false, check(what, r)
	}
}

// cancelAgain: a cancel spares an acquire that had not started yet, and ctx
// may end just before the call enters the library; so the cancel is made
// again at this interval until the call has returned.
const cancelAgain = 20 * time.Millisecond

// callContext is call for an acquire (op, with arguments a, b, c around the
// wait at index waitAt: 0 a, 1 b) that waits until ctx ends. nil when taken
// (the permit id in id); ctx.Err() when ctx ended first, with nothing kept:
// its end cancels the wait, and what a call took as the cancel crossed it
// is given back with undo(id). context.DeadlineExceeded when busy until
// ctx's deadline.
func (f *fhandle) callContext(ctx context.Context, op C.int, what string, args [3]int64,
	waitAt int, undo func(id string)) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	wait := time.Duration(-1) // forever: the context's end cancels it
	deadline, bounded := ctx.Deadline()
	if bounded {
		if wait = time.Until(deadline); wait < time.Millisecond { // ms resolution
			return "", context.DeadlineExceeded
		}
	}
	args[waitAt] = waitArg(wait)
	done := make(chan struct{})
	cancelled := make(chan struct{})
	go f.cancelOnEnd(ctx, done, cancelled)
	_, id, ok, err := f.call(op, what, args[0], args[1], args[2], "")
	close(done)
	select {
	case <-cancelled: // the wait was cancelled (or would have been)
		if ok {
			undo(id)
		}
		return "", ctx.Err()
	default:
	}
	switch {
	case ok:
		return id, nil
	case err == nil && bounded:
		return "", context.DeadlineExceeded // busy until the deadline
	case err == nil:
		return "", errorf(StatusNotAcquired, what, "%q stayed busy", f.name)
	}
	return "", err
}

// cancelOnEnd cancels the handle's waits from ctx's end until done closes;
// it closes cancelled first, so the caller knows the result is the cancel's.
func (f *fhandle) cancelOnEnd(ctx context.Context, done, cancelled chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	close(cancelled)
	t := time.NewTicker(cancelAgain)
	defer t.Stop()
	for {
		f.mu.Lock()
		if f.calls > 0 && f.h != nil { // the call holds h; Close frees it only after
			C.rlcgo_fcancel(f.kind, f.h)
		}
		f.mu.Unlock()
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// errOnly is callContext's error, for the acquires that return no id.
func errOnly(_ string, err error) error { return err }

// giveBack runs a release whose failure nobody could act on: the context's
// end is what the caller sees, and the library drops the level anyway.
func giveBack(release func() error) func(string) {
	return func(string) { _ = release() }
}

func (f *fhandle) freeIfDone() {
	if f.closing && f.calls == 0 && f.h != nil {
		C.rlcgo_ffree(f.kind, f.h)
		f.h = nil
	}
}

// Close frees the handle once no call is in flight. Holds are not released
// on the server: they expire with their lease.
func (f *fhandle) Close() {
	f.mu.Lock()
	f.closing = true
	f.freeIfDone()
	f.mu.Unlock()
	runtime.SetFinalizer(f, nil)
}

// Name is the name as given (several names joined by "," for a MultiLock).
func (f *fhandle) Name() string { return f.name }

func waitArg(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func leaseArg(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// RWLock is a Redisson-compatible read-write lock: many readers or one
// writer; the writer may also read; a waiting writer holds back new readers.
type RWLock struct{ *fhandle }

// NewRWLock makes an RWLock value (a new owner) for name. No network I/O.
func (c *Client) NewRWLock(name string) (*RWLock, error) {
	f, err := newFamily(c, C.FGO_RW, name, nextOwner.Add(1), 0, nil)
	if err != nil {
		return nil, err
	}
	return &RWLock{f}, nil
}

// RLock takes a read level: true when held, false when the wait ran out.
func (l *RWLock) RLock(wait, lease time.Duration) (bool, error) {
	_, _, ok, err := l.call(C.FGO_RW_READ_ACQUIRE, "read lock", waitArg(wait), leaseArg(lease), 0, "")
	return ok, err
}

// RLockContext takes a read level, waiting until ctx ends: nil when held;
// ctx.Err() when ctx ended first (nothing kept, the wait is cancelled);
// context.DeadlineExceeded when busy until ctx's deadline.
func (l *RWLock) RLockContext(ctx context.Context, lease time.Duration) error {
	return errOnly(l.callContext(ctx, C.FGO_RW_READ_ACQUIRE, "read lock",
		[3]int64{0, leaseArg(lease), 0}, 0, giveBack(l.RUnlock)))
}

// RUnlock gives back a read level.
func (l *RWLock) RUnlock() error {
	_, _, _, err := l.call(C.FGO_RW_READ_RELEASE, "read unlock", 0, 0, 0, "")
	return err
}

// Lock takes a write level: true when held, false when the wait ran out.
func (l *RWLock) Lock(wait, lease time.Duration) (bool, error) {
	_, _, ok, err := l.call(C.FGO_RW_WRITE_ACQUIRE, "write lock", waitArg(wait), leaseArg(lease), 0, "")
	return ok, err
}

// LockContext takes a write level, waiting until ctx ends (as
// RLockContext). A cancelled writer's hold on new readers goes with it.
func (l *RWLock) LockContext(ctx context.Context, lease time.Duration) error {
	return errOnly(l.callContext(ctx, C.FGO_RW_WRITE_ACQUIRE, "write lock",
		[3]int64{0, leaseArg(lease), 0}, 0, giveBack(l.Unlock)))
}

// Unlock gives back a write level.
func (l *RWLock) Unlock() error {
	_, _, _, err := l.call(C.FGO_RW_WRITE_RELEASE, "write unlock", 0, 0, 0, "")
	return err
}

// Mode is "free", "read" or "write": the server's mode field.
func (l *RWLock) Mode() (string, error) {
	v, _, _, err := l.call(C.FGO_RW_MODE, "mode", 0, 0, 0, "")
	return [...]string{"free", "read", "write"}[v%3], err
}

// HoldCount is the levels held through this value on the read or write
// side (no network I/O).
func (l *RWLock) HoldCount(write bool) (int64, error) {
	op := C.int(C.FGO_RW_READ_COUNT)
	if write {
		op = C.FGO_RW_WRITE_COUNT
	}
	v, _, _, err := l.call(op, "hold count", 0, 0, 0, "")
	return v, err
}

// FairLock is a Redisson-compatible fair lock: waiters get it in the order
// they came, across clients. One node only.
type FairLock struct{ *fhandle }

// NewFairLock makes a FairLock value (a new owner). threadWait (0: 5 s): a
// waiter that dies leaves the queue within 2 x threadWait. No network I/O.
func (c *Client) NewFairLock(name string, threadWait time.Duration) (*FairLock, error) {
	f, err := newFamily(c, C.FGO_FAIR, name, nextOwner.Add(1), leaseArg(threadWait), nil)
	if err != nil {
		return nil, err
	}
	return &FairLock{f}, nil
}

// Lock takes a level: true when held, false when the wait ran out.
func (l *FairLock) Lock(wait, lease time.Duration) (bool, error) {
	_, _, ok, err := l.call(C.FGO_FAIR_ACQUIRE, "fair lock", waitArg(wait), leaseArg(lease), 0, "")
	return ok, err
}

// LockContext takes a level, waiting until ctx ends (as
// RWLock.RLockContext). A cancelled waiter leaves the queue.
func (l *FairLock) LockContext(ctx context.Context, lease time.Duration) error {
	return errOnly(l.callContext(ctx, C.FGO_FAIR_ACQUIRE, "fair lock",
		[3]int64{0, leaseArg(lease), 0}, 0, giveBack(l.Unlock)))
}

// Unlock gives back a level; at zero the next waiter in line is woken.
func (l *FairLock) Unlock() error {
	_, _, _, err := l.call(C.FGO_FAIR_RELEASE, "fair unlock", 0, 0, 0, "")
	return err
}

// HoldCount is the levels held through this value (no network I/O).
func (l *FairLock) HoldCount() (int64, error) {
	v, _, _, err := l.call(C.FGO_FAIR_COUNT, "hold count", 0, 0, 0, "")
	return v, err
}

// MultiLock holds several RLock names together, all or none.
type MultiLock struct {
	*fhandle
	names []string
}

// NewMultiLock makes a MultiLock value (a new owner) for names (sorted and
// de-duplicated). No network I/O.
func (c *Client) NewMultiLock(names ...string) (*MultiLock, error) {
	f, err := newFamily(c, C.FGO_MULTI, joinNames(names), nextOwner.Add(1), 0, names)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var uniq []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			uniq = append(uniq, n)
		}
	}
	sort.Strings(uniq)
	return &MultiLock{f, uniq}, nil
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

// Names are the distinct names, sorted.
func (m *MultiLock) Names() []string { return append([]string(nil), m.names...) }

// Lock takes every name or none: true when held, false when the wait ran out.
func (m *MultiLock) Lock(wait, lease time.Duration) (bool, error) {
	_, _, ok, err := m.call(C.FGO_MULTI_ACQUIRE, "multi lock", waitArg(wait), leaseArg(lease), 0, "")
	return ok, err
}

// LockContext takes every name or none, waiting until ctx ends (as
// RWLock.RLockContext).
func (m *MultiLock) LockContext(ctx context.Context, lease time.Duration) error {
	return errOnly(m.callContext(ctx, C.FGO_MULTI_ACQUIRE, "multi lock",
		[3]int64{0, leaseArg(lease), 0}, 0, giveBack(m.Unlock)))
}

// Unlock gives back one level of every name; the first failure is returned.
func (m *MultiLock) Unlock() error {
	_, _, _, err := m.call(C.FGO_MULTI_RELEASE, "multi unlock", 0, 0, 0, "")
	return err
}

// Semaphore is a Redisson-compatible RSemaphore: a count of free permits,
// not bound to an owner. One node only.
type Semaphore struct{ *fhandle }

// NewSemaphore makes a Semaphore; permits > 0 sets the count if the
// semaphore has none (one round trip).
func (c *Client) NewSemaphore(name string, permits int64) (*Semaphore, error) {
	f, err := newFamily(c, C.FGO_SEM, name, 0, 0, nil)
	if err != nil {
		return nil, err
	}
	s := &Semaphore{f}
	if permits > 0 {
		if _, err := s.TrySetPermits(permits); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// TrySetPermits sets the count only if the semaphore has none; true if it did.
func (s *Semaphore) TrySetPermits(permits int64) (bool, error) {
	v, _, _, err := s.call(C.FGO_SEM_SET, "try set permits", permits, 0, 0, "")
	return v != 0, err
}

// Available is the number of free permits.
func (s *Semaphore) Available() (int64, error) {
	v, _, _, err := s.call(C.FGO_SEM_AVAILABLE, "available", 0, 0, 0, "")
	return v, err
}

// Acquire takes n permits: true when taken, false when the wait ran out.
func (s *Semaphore) Acquire(n int64, wait time.Duration) (bool, error) {
	_, _, ok, err := s.call(C.FGO_SEM_ACQUIRE, "acquire", n, waitArg(wait), 0, "")
	return ok, err
}

// AcquireContext takes n permits, waiting until ctx ends (as
// RWLock.RLockContext): no permit is taken when ctx ended first.
func (s *Semaphore) AcquireContext(ctx context.Context, n int64) error {
	return errOnly(s.callContext(ctx, C.FGO_SEM_ACQUIRE, "acquire", [3]int64{n, 0, 0}, 1,
		giveBack(func() error { return s.Release(n) })))
}

// Release gives n permits back.
func (s *Semaphore) Release(n int64) error {
	_, _, _, err := s.call(C.FGO_SEM_RELEASE, "release", n, 0, 0, "")
	return err
}

// PermitSemaphore is a Redisson-compatible RPermitExpirableSemaphore:
// permits with a lease, under an id. One node only.
type PermitSemaphore struct{ *fhandle }

// NewPermitSemaphore makes a PermitSemaphore; permits > 0 sets the count if
// the semaphore has none (one round trip).
func (c *Client) NewPermitSemaphore(name string, permits int64) (*PermitSemaphore, error) {
	f, err := newFamily(c, C.FGO_PSEM, name, 0, 0, nil)
	if err != nil {
		return nil, err
	}
	s := &PermitSemaphore{f}
	if permits > 0 {
		if _, err := s.TrySetPermits(permits); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// TrySetPermits sets the count only if the semaphore has none; true if it did.
func (s *PermitSemaphore) TrySetPermits(permits int64) (bool, error) {
	v, _, _, err := s.call(C.FGO_PSEM_SET, "try set permits", permits, 0, 0, "")
	return v != 0, err
}

// Available is the number of free permits (expired ones reclaimed first).
func (s *PermitSemaphore) Available() (int64, error) {
	v, _, _, err := s.call(C.FGO_PSEM_AVAILABLE, "available", 0, 0, 0, "")
	return v, err
}

// Acquire takes n permits with a lease (> 0): their id (32 hex digits), or
// "" when the wait ran out.
func (s *PermitSemaphore) Acquire(n int64, wait, lease time.Duration) (string, error) {
	if lease <= 0 {
		return "", errorf(StatusInvalid, "acquire", "a permit needs a lease > 0 (no watchdog)")
	}
	_, id, _, err := s.call(C.FGO_PSEM_ACQUIRE, "acquire", n, waitArg(wait), leaseArg(lease), "")
	return id, err
}

// AcquireContext takes n permits with a lease (> 0), waiting until ctx ends
// (as RWLock.RLockContext): their id, or "" and why not.
func (s *PermitSemaphore) AcquireContext(ctx context.Context, n int64, lease time.Duration) (string, error) {
	if lease <= 0 {
		return "", errorf(StatusInvalid, "acquire", "a permit needs a lease > 0 (no watchdog)")
	}
	return s.callContext(ctx, C.FGO_PSEM_ACQUIRE, "acquire", [3]int64{n, 0, leaseArg(lease)}, 1,
		func(id string) { _ = s.Release(id) })
}

// Release gives back the permits of id; an *Error with StatusLost if their
// lease had run out (they were back in the pool already).
func (s *PermitSemaphore) Release(id string) error {
	if id == "" {
		return errorf(StatusInvalid, "release", "empty permit id")
	}
	_, _, _, err := s.call(C.FGO_PSEM_RELEASE, "release", 0, 0, 0, id)
	return err
}
