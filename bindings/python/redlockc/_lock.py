"""Lock: one distributed lock name, held per owner (a thread, or an explicit id)."""
import dis
import logging
import sys
import threading
import weakref

from . import _interrupt, _otel, _units
from . import redlockc_core as _core
from ._errors import InvalidArgument, LockLostError, NotAcquiredError, NotOwnerError, error_for
from ._units import lease_ms as _lease_ms
from ._units import lease_refused as _lease_refused
from ._units import wait_ms as _wait_ms

# The hot path calls the generated C functions directly (-fastproxy).
_acquire = _core.rlcpy_acquire
_undo_acquire = _core.rlcpy_undo_acquire
_release = _core.rlc_lock_release

# The main thread's waits are cancelled by a signal (Ctrl-C), so that its
# handler runs at once and not when the lock comes (_interrupt.py). Python
# runs signal handlers in the main thread only: other threads wait in one call.

_log = logging.getLogger("redlockc")

# The opcodes that start a `with` block on the value just computed.
_WITH_OPS = frozenset(op for op in ("BEFORE_WITH", "SETUP_WITH", "BEFORE_ASYNC_WITH",
                                    "SETUP_ASYNC_WITH") if op in dis.opmap)
_with_sites = {}  # (code, offset) -> True if the call there is a `with` subject


def _called_as_with_subject(frame):
    """True if the caller wrote ``with lock.acquire(...):``.

    acquire() returns a bool, which is no context manager: Python would take
    the lock, then raise TypeError with nobody left to release it. Looking at
    the caller's next instruction lets acquire() refuse before taking anything.
    (CPython's bytecode; cached per call site, so the hot path pays a lookup.)
    """
    if frame is None or not _WITH_OPS:
        return False
    site = (frame.f_code, frame.f_lasti)
    found = _with_sites.get(site)
    if found is None:
        found = False
        for ins in dis.get_instructions(frame.f_code):
            if ins.offset > frame.f_lasti and ins.opname not in ("CACHE", "PRECALL", "EXTENDED_ARG"):
                found = ins.opname in _WITH_OPS
                break
        if len(_with_sites) < 4096:
            _with_sites[site] = found
    return found


class _Handle:
    """One C lock handle, shared by every Lock object of one (name, owner).

    A hold belongs to its owner in the client, not to a Python object: the
    client keeps a registry of these by (name, owner), so that a lock taken
    through one Lock object can be released through another, and a Lock
    object that is garbage-collected while its owner still holds the lock
    never frees the handle (which would stop the watchdog renewing it). The
    handle is freed once no Lock object uses it and no level is held through
    it (``levels``: acquires minus releases, over every thread for owner=None).
    """
    __slots__ = ("ptr", "key", "users", "levels", "dispatch", "__weakref__")

    def __init__(self, ptr, key):
        self.ptr = ptr
        self.key = key
        self.users = 0
        self.levels = 0
        self.dispatch = None  # the on_lost dispatcher, alive as long as the handle

    def free(self):
        # rlc_lock_free waits for a running on_lost callback of this handle
        # (the GIL is released meanwhile), so only then may its dispatcher go.
        ptr, self.ptr = self.ptr, None
        if ptr is not None:
            _core.rlc_lock_free(ptr)
        self.dispatch = None


class _LostDispatch:
    """What the C trampoline calls on the watchdog thread: each fn(lock, error).

    One per handle. It refers to the Lock objects weakly (a strong reference
    would keep them alive forever); a loss is also logged on the ``redlockc``
    logger, so that a hold lost after its Lock objects went away is not silent.
    """
    __slots__ = ("name", "callbacks", "stats", "hold_span")

    def __init__(self, name, stats):
        self.name = name
        self.callbacks = {}  # id(lock) -> (weakref to the Lock, fn)
        self.stats = stats  # the client's (_metrics.Stats): losses by reason
        self.hold_span = None  # the OpenTelemetry span of the hold, while held

    def __call__(self, reason):
        self.stats.lost(reason)
        if reason == _core.RLC_E_LOST:
            detail = (f"lock {self.name!r} was lost: its fixed lease ran out, or a renewal "
                      "found its key or this owner's field gone")
        else:
            detail = f"lock {self.name!r} was lost: renewals failed until its validity ran out"
        _log.warning("%s", detail)
        span, self.hold_span = self.hold_span, None
        _otel.hold_ended(span, error_for(reason, detail))
        first = None
        for ref, fn in list(self.callbacks.values()):
            lock = ref()
            if lock is None:
                continue
            try:
                fn(lock, error_for(reason, detail))
            except BaseException as e:  # reported by the trampoline, after the others ran
                first = first or e
        if first is not None:
            raise first

    def __repr__(self):
        fns = [fn for _, fn in self.callbacks.values()]
        return f"<on_lost callbacks {fns!r} of lock {self.name!r}>"


def _drop_user(client, handle):
    """A Lock object of this handle is gone (collected, or the client closed)."""
    client._release_handle(handle)


class Lock:
    """A distributed, reentrant lock on Redis (Redisson's layout), or Redlock.

    Made by ``client.lock(name, owner=None)`` (or ``Lock(client, name,
    owner=None)``); making one does no network I/O. Works like
    ``threading.RLock`` across processes and machines:

    - owner: with ``owner=None`` every call acts for the calling thread (each
      thread is its own owner; one Lock object may be shared by threads);
      with an int every call acts for that explicit owner, from any thread.
    - reentrant: an owner that holds it may acquire again; it is free after
      as many ``release()`` calls.
    - lease: ``lease=None`` lets the client's watchdog renew the lease
      (``watchdog_timeout``, 30 s) until release; ``lease=SECONDS`` is a fixed
      lease with no renewal (the lock expires by itself).
    - waiting: a waiter sleeps until the holder's unlock message (pub/sub) or
      the end of the holder's lease; never a fixed-interval poll.

    All times are in seconds (int or float). Methods that talk to Redis
    release the GIL while they wait, so threads blocked on locks do not stall
    other Python threads.

    Usage::

        with client.lock("orders"):
            ...                      # held; released on exit, also on error

        with client.lock("orders", timeout=5):   # NotAcquiredError after 5 s
            ...

        lock = client.lock("report")
        if lock.acquire(timeout=5, lease=60):
            try: ...
            finally: lock.release()
        with lock(timeout=1):        # one level for the block
            ...

    A hold belongs to its (name, owner) in the client, not to this object:
    another Lock of the same name and owner releases it, and collecting this
    object leaves the hold (and its renewals) alone.

    Failures raise :class:`redlockc.Error` subclasses (``NotOwnerError``,
    ``LockLostError``, ``ConnectionError``, ...); a busy lock is not an
    error: ``acquire()`` returns False.
    """

    __slots__ = ("_client", "_name", "_owner", "_handle", "_ptr", "_timeout", "_lease",
                 "_finalizer", "__weakref__")

    def __init__(self, client, name, owner=None, *, timeout=-1, lease=None):
        """See ``Client.lock()``: name a non-empty str, owner None or an int id;
        timeout and lease are what ``with lock:`` waits and leases (seconds)."""
        if not hasattr(client, "_new_handle"):
            raise TypeError(f"Lock needs a redlockc.Client, not {type(client).__name__}")
        _wait_ms(True, timeout), _lease_ms(lease)  # checked now, not at the first `with`
        self._client = client  # the client outlives its locks' handles
        self._name = name
        self._owner = owner
        self._timeout = timeout
        self._lease = lease
        # Shared by every Lock object of this (name, owner) in the client.
        self._handle = client._new_handle(name, owner)
        self._ptr = self._handle.ptr
        self._finalizer = weakref.finalize(self, _drop_user, client, self._handle)
        # Not at interpreter exit: another thread (a daemon) may still be inside
        # a call on this handle then; the process ends anyway.
        self._finalizer.atexit = False

    # ---- acquiring and releasing ------------------------------------------------

    def acquire(self, blocking=True, timeout=-1, lease=None):
        """Acquires the lock for this owner; returns True, or False if it stayed busy.

        blocking: False tries once and returns at once (then ``timeout`` must
            be left at -1, as with ``threading.Lock``).
        timeout: seconds to wait at most when blocking; -1 (or None) waits
            forever; 0 tries once.
        lease: None (default): the watchdog keeps the lock alive until
            release(); a positive number of seconds: a fixed lease, no renewal.
            A nested acquire keeps the mode and lease of the first and
            refreshes that lease.

        Raises ConnectionError, TimeoutError, NoQuorumError, ServerError,
        AuthenticationError, ClosedError; InvalidArgument (a ValueError) or
        TypeError for bad arguments.
        """
        if _called_as_with_subject(sys._getframe(1)):
            raise TypeError("acquire() returns a bool, not a context manager: write "
                            f"`with lock(timeout={timeout!r}):` (nothing was acquired)")
        wait, lease_ms = _wait_ms(blocking, timeout), _lease_ms(lease)
        try:
            return self._take(wait, lease_ms)
        except InvalidArgument as e:  # from C, which took nothing
            raise _lease_refused(e, lease) from None

    def _take(self, wait, lease):
        # got[0]: the C call took a level in this call. Any exception on the
        # way out (a KeyboardInterrupt from a signal handler, which Python
        # runs right after a C call returns) gives that level back first:
        # the caller never got True, so nobody else would release it.
        got = [False]
        stats = self._client._stats
        span = _otel.acquire_started(self._name)
        start, result, error = stats.enter(), "error", None
        try:
            taken = self._acquire(wait, lease, got)
            result = "acquired" if taken else "busy"
        except BaseException as e:
            _undo_acquire(self._ptr, got)
            error = e
            raise
        finally:
            stats.leave(start, result)
            _otel.acquire_ended(span, result, error)
        if taken:
            self._client._count_level(self._handle, 1)
        return taken

    def _acquire(self, wait, lease, got):
        # main_thread() asked each time: after a fork from another thread,
        # the child's main thread is that one.
        if wait != 0 and threading.get_ident() == threading.main_thread().ident:
            return _interrupt.acquire(self._ptr, wait, lease, got)
        return _acquire(self._ptr, wait, lease, got)

    def release(self):
        """Releases one level of this owner's hold; at zero deletes it and wakes waiters.

        Raises NotOwnerError if this owner does not hold it, LockLostError if
        it held it but the lock expired or was taken meanwhile (in both
        cases nothing on the server is touched), or an I/O error.
        """
        try:
            _release(self._ptr)
        except LockLostError:
            self._client._count_level(self._handle, -1)  # a lost level is used up
            raise
        except NotOwnerError:
            if self._owner is not None:  # this owner holds nothing here any more
                self._client._count_level(self._handle, None)
            raise
        self._client._count_level(self._handle, -1)

    def extend(self, seconds):
        """Sets this owner's lease to ``seconds`` from now (a fixed lease; the
        watchdog stops), or with ``None`` hands the lock back to the watchdog.

        Raises NotOwnerError, LockLostError, or an I/O error.
        """
        ms = _lease_ms(seconds, "extend's lease")
        try:
            _core.rlc_lock_extend(self._ptr, ms)
        except InvalidArgument as e:  # from C: too short for the drift allowance
            raise _lease_refused(e, seconds, "extend's lease") from None

    def force_release(self):
        """Deletes the lock whoever holds it and wakes its waiters (an admin action).

        Succeeds whether or not it was held.
        """
        _core.rlc_lock_force_release(self._ptr)

    def __enter__(self):
        """``with lock:`` acquires with the lock's timeout and lease (by default
        waiting as long as it takes, watchdog lease); NotAcquiredError if the
        timeout ran out."""
        self._enter(self._timeout, self._lease)
        return self

    def _enter(self, timeout, lease):
        # An exception raised here skips __exit__: _take gives back what it took.
        wait, lease_ms = _wait_ms(True, timeout), _lease_ms(lease)
        try:
            taken = self._take(wait, lease_ms)
        except InvalidArgument as e:
            raise _lease_refused(e, lease) from None
        if not taken:
            raise NotAcquiredError(_core.RLC_NOT_ACQUIRED,
                                   f"lock {self._name!r} is busy: the wait of {timeout} s ran out")

    def __call__(self, timeout=-1, lease=None):
        """``with lock(timeout=5, lease=None):`` acquires for the block, then releases.

        timeout and lease as in acquire(); raises NotAcquiredError if the
        lock stayed busy for ``timeout`` seconds.
        """
        _wait_ms(True, timeout), _lease_ms(lease)
        return _Scoped(self, timeout, lease)

    def __exit__(self, *exc):
        """Releases one level when the block ends, also when it raised."""
        self.release()

    async def __aenter__(self):
        """Refused: this Lock blocks its thread; asyncio code uses redlockc.asyncio."""
        raise TypeError("redlockc.Lock blocks the calling thread and has no `async with`: "
                        "in asyncio code use redlockc.asyncio.Client(...).lock(name) "
                        "(nothing was acquired)")

    async def __aexit__(self, *exc):  # pragma: no cover (never entered)
        pass

    # ---- state ----------------------------------------------------------------

    def locked(self):
        """True if anyone holds the lock (on a quorum of nodes). Asks Redis."""
        return _core.rlc_lock_is_locked(self._ptr)

    def owned(self):
        """True if this owner holds it now: False once its validity has run out
        (a fixed lease that ended, a watchdog hold not renewed in time), without
        asking Redis then; else asks Redis."""
        return _core.rlc_lock_is_held(self._ptr)

    @property
    def hold_count(self):
        """This owner's reentrancy count on the server: 0 if not held, and 0 once
        its validity has run out (then without asking Redis). Asks Redis."""
        return _core.rlc_lock_hold_count(self._ptr)

    @property
    def ttl(self):
        """The lock's remaining lease on the server in seconds (float), as Redis
        says it: None if nobody holds it, ``math.inf`` if it has no expiry.
        Over N nodes: the value a quorum of nodes has at least. Asks Redis.
        """
        return _units.ttl_seconds(_core.rlc_lock_ttl_ms(self._ptr))

    @property
    def validity(self):
        """Seconds (float) this owner's hold is certainly still held, at this
        call, by the client's monotonic clock: the lease, less the time since
        the acquire, renewal or extend that a quorum confirmed, less the drift
        allowance. 0.0 when not held through this handle, lost, or run out (a
        fixed lease falls to 0 at its end). A healthy watchdog hold stays above
        about 2/3 of ``watchdog_timeout`` (it is renewed every third of it).
        No network I/O.
        """
        return _core.rlc_lock_validity_ms(self._ptr) / 1000

    @property
    def fencing_token(self):
        """The fencing token of this owner's current hold (an int): the counter
        ``redisson_lock_token:{name}`` at the moment the hold began, so it grows
        with each new holder. Needs the client option ``fencing=True``:
        without it raises InvalidArgument (no hold takes a token). Raises
        NotOwnerError when not held through this handle, LockLostError once
        lost or once its validity has run out (the token may no longer be the
        newest). No network I/O.
        """
        return _core.rlc_lock_fencing_token(self._ptr)

    def on_lost(self, fn):
        """Calls ``fn(lock, error)`` once per lost hold; returns fn (a decorator works).

        A hold is lost when its validity runs out: a fixed lease (``lease=``,
        ``extend(seconds)``) at its end, before its last release; a
        watchdog-renewed hold when a renewal finds its key or field gone, or
        when renewals cannot reach a quorum in time. ``error`` is a
        LockLostError (or the I/O error that kept renewals out). ``fn``
        runs on the client's watchdog thread, with the GIL held; keep it
        short. An exception in it goes to ``sys.unraisablehook`` (printed by
        default) and changes nothing else. ``None`` removes the callback.
        """
        if fn is not None and not callable(fn):
            raise TypeError(f"on_lost needs a callable or None, not {type(fn).__name__}")
        self._client._set_on_lost(self, self._handle, fn)
        return fn

    # ---- identity --------------------------------------------------------------

    @property
    def name(self):
        """The lock's name, as given (the Redis key is key_prefix + name)."""
        return self._name

    @property
    def owner(self):
        """The explicit owner id, or None: the calling thread is the owner."""
        return self._owner

    @property
    def client(self):
        """The Client this lock belongs to."""
        return self._client

    def __reduce__(self):
        """Refused: a lock handle belongs to its process (and its client)."""
        raise TypeError("a redlockc.Lock cannot be pickled or sent to another process: "
                        "create a Client and its locks in that process")

    def __repr__(self):
        owner = "thread" if self._owner is None else self._owner
        return f"<redlockc.Lock {self._name!r} owner={owner}>"


class _Scoped:
    """``with lock(timeout=..., lease=...):``: one level for the block."""
    __slots__ = ("_lock", "_timeout", "_lease")

    def __init__(self, lock, timeout, lease):
        self._lock, self._timeout, self._lease = lock, timeout, lease

    def __enter__(self):
        self._lock._enter(self._timeout, self._lease)
        return self._lock

    def __exit__(self, *exc):
        self._lock.release()
