"""Signals during a blocking acquire in the main thread: the C wait is cancelled.

Python runs a signal handler (Ctrl-C's KeyboardInterrupt) in the main thread,
between bytecodes; while that thread sleeps in a C call, the handler waits for
the call to return, which would make Ctrl-C wait for the lock.

Instead of cutting the wait into short polls, the main thread's wait is made
cancellable: while it lasts, Python's wakeup fd (which Python's own C signal
handler writes each signal's number to) is a pipe, read by a thread of this
module that cancels the wait (rlc_lock_cancel, or the family handle's
rlc_rwlock_cancel etc., in redlockc.i). The C call then
returns, having kept nothing, and the handler runs: if it raises, that is
what the caller sees; if it returns, the wait goes on for what is left of it,
as Python's own sleeps do after a signal (PEP 475).
"""
import math
import os
import signal
import threading
import time

from . import redlockc_core as _core

_acquire_main = _core.rlcpy_acquire_main
_signal_arrived = _core.rlcpy_signal_arrived
_core.rlcpy_register_set_wakeup_fd(signal.set_wakeup_fd)

_mu = threading.Lock()
_pipe_of = {}  # pid -> the write end of that process's pipe (a forked child makes its own)


def _read(rfd):
    while True:
        try:
            data = os.read(rfd, 512)
        except InterruptedError:
            continue
        if not data:
            return
        _signal_arrived(data)


def _wake_fd():
    pid = os.getpid()
    with _mu:
        if pid not in _pipe_of:
            rfd, wfd = os.pipe()
            os.set_blocking(wfd, False)  # a signal handler must never block on it
            threading.Thread(target=_read, args=(rfd,), name="redlockc-signals",
                             daemon=True).start()
            _pipe_of[pid] = wfd
        return _pipe_of[pid]


def _handle_signals():
    """Python runs a pending signal handler on entering a function: here."""


def wait_main(call, wait):
    """call(wait, wake_fd), one of redlockc.i's rlcpy_*_acquire_main, until it
    answers: what it returns, or raises; a signal ends the wait at once and
    its handler's exception is raised. wait: ms, -1 forever."""
    deadline = None if wait < 0 else time.monotonic() + wait / 1000
    while True:
        answer = call(wait, _wake_fd())
        if answer is not None:
            return answer
        _handle_signals()  # a KeyboardInterrupt leaves here
        if deadline is not None:
            wait = max(0, math.ceil((deadline - time.monotonic()) * 1000))


def acquire(ptr, wait, lease, got):
    """rlcpy_acquire for the main thread: True or False, or raises."""
    return wait_main(lambda w, fd: _acquire_main(ptr, w, lease, got, fd), wait)
