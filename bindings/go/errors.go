package redlockc

// #include "shim.h"
import "C"

import "fmt"

// Status is a libredlockc status code (stable numbers, as in redlockc.h).
type Status int

const (
	StatusOK          Status = 0
	StatusNotAcquired Status = 1 // busy until the wait ran out
	StatusInvalid     Status = -1
	StatusNoMemory    Status = -2
	StatusConnect     Status = -3
	StatusTimeout     Status = -4
	StatusNotOwner    Status = -5
	StatusLost        Status = -6
	StatusNoQuorum    Status = -7
	StatusServer      Status = -8
	StatusProtocol    Status = -9
	StatusClosed      Status = -10
	StatusAuth        Status = -11
	StatusCanceled    Status = -12 // the wait was cancelled (a Context ended it)
)

// String is the library's phrase for the status ("lock lost").
func (s Status) String() string { return C.GoString(C.rlc_strerror(C.int(s))) }

// Error is a failed call. Compare with errors.Is against the sentinels below:
// errors.Is(err, redlockc.ErrLost).
type Error struct {
	Status Status
	Op     string // the call, e.g. "acquire"
	Detail string // rlc_errmsg() of the failing call
}

func (e *Error) Error() string {
	msg := "redlockc: "
	if e.Op != "" {
		msg += e.Op + ": "
	}
	msg += e.Status.String()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is matches any *Error of the same status, so sentinels work with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

var (
	ErrNotAcquired = &Error{Status: StatusNotAcquired}
	ErrInvalid     = &Error{Status: StatusInvalid}
	ErrNoMemory    = &Error{Status: StatusNoMemory}
	ErrConnect     = &Error{Status: StatusConnect}
	ErrTimeout     = &Error{Status: StatusTimeout}
	ErrNotOwner    = &Error{Status: StatusNotOwner}
	ErrLost        = &Error{Status: StatusLost}
	ErrNoQuorum    = &Error{Status: StatusNoQuorum}
	ErrServer      = &Error{Status: StatusServer}
	ErrProtocol    = &Error{Status: StatusProtocol}
	ErrClosed      = &Error{Status: StatusClosed}
	ErrAuth        = &Error{Status: StatusAuth}
	ErrCanceled    = &Error{Status: StatusCanceled}
)

// check turns a shim result into nil or an *Error.
func check(op string, r C.struct_rlcgo_result) error {
	if r.rc == 0 {
		return nil
	}
	return &Error{Status: Status(r.rc), Op: op, Detail: C.GoString(&r.msg[0])}
}

func errorf(status Status, op, format string, args ...any) error {
	return &Error{Status: status, Op: op, Detail: fmt.Sprintf(format, args...)}
}
