"""The exceptions: one class per status code of the C library.

Every failure of a C call raises the class registered here for its status,
built as ``cls(code, detail)`` by the generated module: ``code`` is the
negative RLC_E_* number and ``detail`` the calling thread's ``rlc_errmsg()``
(for example "WRONGTYPE ... at 127.0.0.1:6380 for key 'orders'"). The text
is the detail alone: the library writes it to stand on its own, often with
the status's phrase in it, and the class already names the status
("redlockc.ServerError: WRONGTYPE ..."). With no detail it is the phrase.

Where a standard exception means the same thing, the class derives from it
too, so generic handlers work: ``InvalidArgument`` is a ``ValueError``,
``ConnectionError`` and ``TimeoutError`` are the built-in ones (both
``OSError``), ``OutOfMemoryError`` is a ``MemoryError``.
"""
import builtins

from . import redlockc_core as _core


class Error(Exception):
    """Base class of every redlockc failure.

    Attributes:
        code: the C status (a negative ``RLC_E_*`` value).
        detail: what went wrong, the C library's per-thread detail
            (``rlc_errmsg()``) or the Python layer's own words.
        message: ``str(error)``: the detail ("lock 'orders' was lost ..."),
            or, without one, the library's phrase for the status.
    """

    #: The status this class stands for (None on the base class).
    status = None

    def __init__(self, code, detail=None):
        # Not "phrase: detail": details often say the phrase already, which
        # then read twice ("lock lost: it expired or was taken: lock 'x' was
        # lost: it expired or was taken").
        message = detail or _core.rlc_strerror(code)
        # One argument only: for the OSError subclasses two would be read as
        # (errno, strerror) and printed as "[Errno -3] ...".
        super().__init__(message)
        self.code = code
        self.detail = message
        self.message = message

    def __str__(self):
        return self.message

    def __reduce__(self):
        # Pickled as (code, detail), so errors cross multiprocessing intact.
        return (type(self), (self.code, self.detail))


class InvalidArgument(Error, ValueError):
    """A bad argument: wrong value, malformed URI, unknown or out-of-range option."""
    status = _core.RLC_E_INVAL


class OutOfMemoryError(Error, MemoryError):
    """The C library could not allocate memory."""
    status = _core.RLC_E_NOMEM


class ConnectionError(Error, builtins.ConnectionError):  # noqa: A001 (shadows on purpose)
    """Could not connect to a node, or the connection broke."""
    status = _core.RLC_E_CONNECT


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """A node did not answer within io_timeout (node_timeout for Redlock)."""
    status = _core.RLC_E_TIMEOUT


class NotOwnerError(Error):
    """release()/extend()/fencing_token by an owner that does not hold the lock.

    Nothing was changed on the server.
    """
    status = _core.RLC_E_NOT_OWNER


class LockLostError(Error):
    """The lock was held, and expired or was taken (the watchdog could not renew it).

    Nothing was changed on the server: another owner may hold it now.
    """
    status = _core.RLC_E_LOST


class NoQuorumError(Error):
    """Fewer than N/2+1 Redlock nodes answered: an outage, not contention."""
    status = _core.RLC_E_NO_QUORUM


class ServerError(Error):
    """Redis replied an error (WRONGTYPE, READONLY, OOM, ...)."""
    status = _core.RLC_E_SERVER


class ProtocolError(Error):
    """The server's reply made no sense."""
    status = _core.RLC_E_PROTOCOL


class ClosedError(Error):
    """The client was closed, or is used in a forked child process."""
    status = _core.RLC_E_CLOSED


class AuthenticationError(Error):
    """AUTH was refused, or the server wants a password."""
    status = _core.RLC_E_AUTH


class CancelledError(Error):
    """The acquire was cancelled (``rlc_lock_cancel``); nothing was kept.

    Not asyncio's: this one is an ``Error`` (an Exception). ``acquire()``
    cancels its own wait when a signal handler raises (Ctrl-C), and the
    handler's exception is what the caller sees then.
    """
    status = _core.RLC_E_CANCELED


class NotAcquiredError(Error):
    """The lock stayed busy until the wait ran out (raised only by ``with``).

    ``acquire()`` returns False for this; ``with client.lock(name, timeout=5):``
    and ``with lock(timeout=5):`` have no value to return, so they raise it.
    """
    status = _core.RLC_NOT_ACQUIRED


#: Every status code's class, by code.
BY_STATUS = {cls.status: cls for cls in (
    InvalidArgument, OutOfMemoryError, ConnectionError, TimeoutError, NotOwnerError,
    LockLostError, NoQuorumError, ServerError, ProtocolError, ClosedError,
    AuthenticationError, CancelledError)}

for _status, _cls in BY_STATUS.items():
    _core.rlcpy_register_error(_status, _cls)
BY_STATUS[NotAcquiredError.status] = NotAcquiredError  # never raised by C calls


def error_for(code, detail=None):
    """An exception instance for a status code (the class registered for it)."""
    return BY_STATUS.get(code, Error)(code, detail)


def invalid(detail):
    """An InvalidArgument raised by the Python layer itself (status RLC_E_INVAL)."""
    return InvalidArgument(_core.RLC_E_INVAL, detail)
