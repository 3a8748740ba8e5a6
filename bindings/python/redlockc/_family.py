"""The lock family: ReadWriteLock, FairLock, Semaphore, PermitExpirableSemaphore, MultiLock.

Made by the client (``client.rwlock(name)``, ``client.fair_lock(name)``,
``client.semaphore(name, permits)``, ``client.permit_semaphore(name, permits)``,
``client.multi_lock(names)``); Redisson's data layout on the server
(docs/FAMILY.md). The verbs are ``threading``'s: ``acquire(blocking=True,
timeout=-1, ...)`` returns True or False (busy), ``release()``, and ``with``.
Times are seconds. Failures raise the same ``redlockc.Error`` subclasses as
``Lock``; levels are counted per handle, so release through the object that
acquired.

In the main thread a waiting acquire is cancelled by a signal (Ctrl-C) and
the handler's exception (KeyboardInterrupt) is raised at once, with nothing
kept, as for ``Lock`` (_interrupt.py; the handle's rlc_*_cancel ends the C
wait); a handler that returns lets the wait go on.
"""
import threading
import weakref

from . import redlockc_core as _core
from . import _interrupt, _units
from ._errors import ClosedError, InvalidArgument, invalid
from ._errors import TimeoutError as _TimeoutError
from ._units import lease_ms as _lease_ms
from ._units import lease_refused as _lease_refused
from ._units import owner_id as _owner_id  # one rule for every owner-bound handle
from ._units import wait_ms as _wait_ms

_MODES = {0: None, 1: "read", 2: "write"}


def _count(value, what):
    """A number of permits: a positive int."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value <= 0 or value >= 2**62:
        raise invalid(f"{what} must be a positive int, got {value}")
    return value


class FamilyClientMixin:
    """The family's constructors on ``redlockc.Client`` (needs ``_mu`` and ``_ptr``)."""

    def _family_handle(self, new, *args):
        """new(client_ptr, *args) under _mu, so close() cannot free the client meanwhile."""
        with self._mu:
            if self._ptr is None:
                raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
            return new(self._ptr, *args)

    def rwlock(self, name, owner=None):
        """A ReadWriteLock for ``name``: ``with rw.read(): ...``, ``with rw.write(): ...``."""
        return ReadWriteLock(self, name, owner)

    def fair_lock(self, name, owner=None, thread_wait=None):
        """A FairLock for ``name`` (first come, first served; one node only)."""
        return FairLock(self, name, owner, thread_wait)

    def semaphore(self, name, permits=None):
        """A Semaphore; with ``permits`` it sets the count if the semaphore has none."""
        return Semaphore(self, name, permits)

    def permit_semaphore(self, name, permits=None):
        """A PermitExpirableSemaphore; ``permits`` as for ``semaphore()``."""
        return PermitExpirableSemaphore(self, name, permits)

    def multi_lock(self, names, owner=None):
        """A MultiLock: every name of ``names`` held together, or none."""
        return MultiLock(self, names, owner)


class _Handle:
    """A C handle freed once, by garbage collection (not at interpreter exit)."""

    __slots__ = ("_client", "_ptr", "_finalizer", "__weakref__")

    def _attach(self, client, ptr, free):
        self._client = client  # the client outlives the handle
        self._ptr = ptr
        self._finalizer = weakref.finalize(self, free, ptr)
        self._finalizer.atexit = False

    @property
    def client(self):
        """The Client this handle belongs to."""
        return self._client

    def __reduce__(self):
        raise TypeError(f"a redlockc.{type(self).__name__} cannot be pickled or sent to "
                        "another process: create a Client and its locks in that process")


def _check_client(client):
    if not hasattr(client, "_family_handle"):
        raise TypeError(f"needs a redlockc.Client, not {type(client).__name__}")


def _take(plain, main, undo, wait):
    """plain(wait), the C acquire; in the main thread main(wait, got, wake_fd)
    instead, one of redlockc.i's rlcpy_*_acquire_main, which a signal
    cancels. Python runs a signal handler right after a C call returns, so
    its KeyboardInterrupt can come after the call took something and before
    the caller saw it: got[0] (what was taken) is then given back by
    undo(got[0]), since nobody else would."""
    # main_thread() asked each time: after a fork from another thread, the
    # child's main thread is that one.
    if threading.get_ident() != threading.main_thread().ident:
        return plain(wait)
    got = [False]
    try:
        return _interrupt.wait_main(lambda w, fd: main(w, got, fd), wait)
    except BaseException:
        if got[0]:
            _give_back(undo, got[0])
        raise


def _give_back(undo, taken):
    # Not reported: the exception on its way is what the caller must see.
    try:
        undo(taken)
    except Exception:  # noqa: BLE001 - see above
        pass


def _acquire_with(plain, main, undo, blocking, timeout, lease):
    """_take with a lease: plain(ptr-bound)(wait, lease_ms), main(wait, lease_ms, got, fd)."""
    wait, lease_ms = _wait_ms(blocking, timeout), _lease_ms(lease)
    try:
        return _take(lambda w: plain(w, lease_ms),
                     lambda w, got, fd: main(w, lease_ms, got, fd), undo, wait)
    except InvalidArgument as e:  # from C, which took nothing
        raise _lease_refused(e, lease) from None


class ReadWriteLock(_Handle):
    """A Redisson-compatible read-write lock: many readers or one writer.

    ``rw.read()`` and ``rw.write()`` give the two sides, each a lock with
    ``acquire(blocking=True, timeout=-1, lease=None)``, ``release()`` and
    ``with``. Both sides are reentrant; the writer may also take read levels;
    a reader cannot upgrade (asking for the write side while reading waits
    for itself). A waiting writer holds back new readers, so readers cannot
    starve it. Over N nodes it is Redlock.
    """

    __slots__ = ("_name", "_owner", "_read", "_write")

    def __init__(self, client, name, owner=None):
        _check_client(client)
        name = _units.text(name, "lock name")
        ptr = client._family_handle(_core.rlc_rwlock_new, name, _owner_id(owner))
        self._attach(client, ptr, _core.rlc_rwlock_free)
        self._name, self._owner = name, owner
        self._read = _Side(self, False)
        self._write = _Side(self, True)

    def read(self):
        """The read side (many holders at once)."""
        return self._read

    def write(self):
        """The write side (one holder, no readers but its own)."""
        return self._write

    @property
    def mode(self):
        """``None`` (free), ``"read"`` or ``"write"``: the server's mode field. Asks Redis."""
        return _MODES.get(_core.rlcswig_rwlock_mode(self._ptr))

    @property
    def name(self):
        return self._name

    @property
    def owner(self):
        return self._owner

    def __repr__(self):
        owner = "thread" if self._owner is None else self._owner
        return f"<redlockc.ReadWriteLock {self._name!r} owner={owner}>"


class _Side:
    """One side of a ReadWriteLock (``rw.read()`` or ``rw.write()``)."""

    __slots__ = ("_rw", "_write", "_acq", "_rel")

    def __init__(self, rw, write):
        self._rw, self._write = rw, write
        self._acq = _core.rlc_rwlock_write_acquire if write else _core.rlc_rwlock_read_acquire
        self._rel = _core.rlc_rwlock_write_release if write else _core.rlc_rwlock_read_release

    def acquire(self, blocking=True, timeout=-1, lease=None):
        """Takes one level of this side; True, or False if it stayed busy.

        timeout: seconds (-1 or None: forever; 0: once); lease: None for the
        watchdog, or a fixed lease in seconds.
        """
        ptr, write, rel = self._rw._ptr, int(self._write), self._rel
        return _acquire_with(
            lambda w, ls: self._acq(ptr, w, ls),
            lambda w, ls, got, fd: _core.rlcpy_rwlock_acquire_main(ptr, write, w, ls, got, fd),
            lambda _taken: rel(ptr), blocking, timeout, lease)

    def release(self):
        """Gives back one level. NotOwnerError if none is held, LockLostError if lost."""
        self._rel(self._rw._ptr)

    @property
    def hold_count(self):
        """Levels held through this handle on this side (0 once lost). No network I/O."""
        return _core.rlc_rwlock_hold_count(self._rw._ptr, int(self._write))

    @property
    def validity(self):
        """Seconds this side's hold is certainly valid (0.0 if none). No network I/O."""
        return _core.rlc_rwlock_validity_ms(self._rw._ptr, int(self._write)) / 1000

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        side = "write" if self._write else "read"
        return f"<{side} side of {self._rw!r}>"


class FairLock(_Handle):
    """A Redisson-compatible fair lock: waiters get it in the order they came.

    Like ``Lock`` (reentrant, watchdog or fixed lease, ``with``), plus FIFO
    hand-off across clients. ``thread_wait`` (seconds, default 5): a waiter
    that dies leaves the queue at most twice that after its last try. One
    node only: over N nodes the constructor raises InvalidArgument.
    """

    __slots__ = ("_name", "_owner")

    def __init__(self, client, name, owner=None, thread_wait=None):
        _check_client(client)
        name = _units.text(name, "lock name")
        tw = 0 if thread_wait is None else _lease_ms(thread_wait, "thread_wait")
        ptr = client._family_handle(_core.rlc_fairlock_new, name, _owner_id(owner), tw)
        self._attach(client, ptr, _core.rlc_fairlock_free)
        self._name, self._owner = name, owner

    def acquire(self, blocking=True, timeout=-1, lease=None):
        """As ``Lock.acquire``: True, or False if it stayed busy."""
        ptr = self._ptr
        return _acquire_with(
            lambda w, ls: _core.rlc_fairlock_acquire(ptr, w, ls),
            lambda w, ls, got, fd: _core.rlcpy_fairlock_acquire_main(ptr, w, ls, got, fd),
            lambda _taken: _core.rlc_fairlock_release(ptr), blocking, timeout, lease)

    def release(self):
        """Gives back one level; at zero the next waiter in line is woken."""
        _core.rlc_fairlock_release(self._ptr)

    @property
    def hold_count(self):
        """Levels held through this handle (0 once lost). No network I/O."""
        return _core.rlc_fairlock_hold_count(self._ptr)

    @property
    def validity(self):
        """Seconds the hold is certainly valid (0.0 if none). No network I/O."""
        return _core.rlc_fairlock_validity_ms(self._ptr) / 1000

    @property
    def name(self):
        return self._name

    @property
    def owner(self):
        return self._owner

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        owner = "thread" if self._owner is None else self._owner
        return f"<redlockc.FairLock {self._name!r} owner={owner}>"


class Semaphore(_Handle):
    """A Redisson-compatible semaphore (RSemaphore): a count of free permits.

    Not bound to an owner: any thread or process may release. Like
    ``threading.Semaphore``: ``acquire(permits=1, blocking=True,
    timeout=-1)``, ``release(permits=1)``, ``with sem:`` (one permit). A
    holder that dies does not give its permits back: use
    ``PermitExpirableSemaphore`` for that. One node only.
    """

    __slots__ = ("_name",)

    def __init__(self, client, name, permits=None):
        _check_client(client)
        name = _units.text(name, "semaphore name")
        ptr = client._family_handle(_core.rlc_semaphore_new, name)
        self._attach(client, ptr, _core.rlc_semaphore_free)
        self._name = name
        if permits is not None:
            self.try_set_permits(permits)

    def try_set_permits(self, permits):
        """Sets the count to ``permits`` only if the semaphore has none; True if it did."""
        return _core.rlc_semaphore_try_set_permits(self._ptr, _count(permits, "permits"))

    @property
    def available(self):
        """Free permits now. Asks Redis."""
        return _core.rlc_semaphore_available(self._ptr)

    def acquire(self, permits=1, blocking=True, timeout=-1):
        """Takes ``permits`` free permits, waiting for them; True, or False on timeout."""
        ptr, n = self._ptr, _count(permits, "permits")
        return _take(lambda w: _core.rlc_semaphore_acquire(ptr, n, w),
                     lambda w, got, fd: _core.rlcpy_semaphore_acquire_main(ptr, n, w, got, fd),
                     lambda _taken: _core.rlc_semaphore_release(ptr, n),
                     _wait_ms(blocking, timeout))

    def release(self, permits=1):
        """Gives ``permits`` back and wakes waiters."""
        _core.rlc_semaphore_release(self._ptr, _count(permits, "permits"))

    @property
    def name(self):
        return self._name

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"<redlockc.Semaphore {self._name!r}>"


class PermitExpirableSemaphore(_Handle):
    """A Redisson-compatible RPermitExpirableSemaphore: permits with a lease.

    ``acquire(permits=1, blocking=True, timeout=-1, lease=...)`` returns the
    permit id (a str of 32 hex digits) or None if none came in time;
    ``release(permit_id)`` gives them back, or raises LockLostError if their
    lease ran out first (they were already back in the pool). Never more
    than the set count out at once, even if holders die or stall.
    ``with sem.permit(lease=10) as permit_id:`` takes one and gives it back.
    One node only.
    """

    __slots__ = ("_name",)

    def __init__(self, client, name, permits=None):
        _check_client(client)
        name = _units.text(name, "semaphore name")
        ptr = client._family_handle(_core.rlc_psemaphore_new, name)
        self._attach(client, ptr, _core.rlc_psemaphore_free)
        self._name = name
        if permits is not None:
            self.try_set_permits(permits)

    def try_set_permits(self, permits):
        """Sets the count to ``permits`` only if the semaphore has none; True if it did."""
        return _core.rlc_psemaphore_try_set_permits(self._ptr, _count(permits, "permits"))

    @property
    def available(self):
        """Free permits now (expired ones are reclaimed first). Asks Redis."""
        return _core.rlc_psemaphore_available(self._ptr)

    def acquire(self, permits=1, blocking=True, timeout=-1, lease=None):
        """Takes ``permits`` under one id with a lease (seconds, required); the id or None."""
        if lease is None:
            raise invalid("a permit needs a lease in seconds (expirable permits have no "
                          "watchdog)")
        ptr, n = self._ptr, _count(permits, "permits")
        # The main thread's call answers False when busy (None: a signal).
        permit = _acquire_with(
            lambda w, ls: _core.rlc_psemaphore_acquire(ptr, n, w, ls),
            lambda w, ls, got, fd: _core.rlcpy_psemaphore_acquire_main(ptr, n, w, ls, got, fd),
            lambda permit_id: _core.rlc_psemaphore_release(ptr, permit_id),
            blocking, timeout, lease)
        return permit or None

    def release(self, permit_id):
        """Gives back the permits of ``permit_id``; LockLostError if they had expired."""
        _core.rlc_psemaphore_release(self._ptr, _units.text(permit_id, "permit id"))

    def permit(self, permits=1, timeout=-1, lease=None):
        """A context manager: ``with sem.permit(lease=10) as permit_id:``."""
        return _Permit(self, permits, timeout, lease)

    @property
    def name(self):
        return self._name

    def __repr__(self):
        return f"<redlockc.PermitExpirableSemaphore {self._name!r}>"


class _Permit:
    __slots__ = ("_sem", "_args", "_id")

    def __init__(self, sem, permits, timeout, lease):
        self._sem, self._args, self._id = sem, (permits, True, timeout, lease), None

    def __enter__(self):
        self._id = self._sem.acquire(*self._args)
        if self._id is None:
            raise _TimeoutError(_core.RLC_E_TIMEOUT,
                                f"no permit of {self._sem.name!r} came within the timeout")
        return self._id

    def __exit__(self, *exc):
        pid, self._id = self._id, None
        self._sem.release(pid)


class MultiLock(_Handle):
    """Several RLock names held together, all or none (no deadlock between overlaps).

    ``acquire(blocking=True, timeout=-1, lease=None)``, ``release()`` (one
    level of every name), ``with``. Names are sorted and de-duplicated; each
    is an ordinary ``Lock`` name on the server (Redisson's layout).
    """

    __slots__ = ("_names", "_owner")

    def __init__(self, client, names, owner=None):
        _check_client(client)
        if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
            raise TypeError("names must be an iterable of str")
        names = [_units.text(n, "lock name") for n in names]
        if not names:
            raise invalid("a multi-lock needs at least one name")
        ptr = client._family_handle(_core.rlc_multilock_new, names, _owner_id(owner))
        self._attach(client, ptr, _core.rlc_multilock_free)
        self._names = tuple(sorted(set(names), key=lambda n: n.encode("utf-8")))
        self._owner = owner

    def acquire(self, blocking=True, timeout=-1, lease=None):
        """Takes every name (one level each) or none; True, or False if one stayed busy."""
        ptr = self._ptr
        return _acquire_with(
            lambda w, ls: _core.rlc_multilock_acquire(ptr, w, ls),
            lambda w, ls, got, fd: _core.rlcpy_multilock_acquire_main(ptr, w, ls, got, fd),
            lambda _taken: _core.rlc_multilock_release(ptr), blocking, timeout, lease)

    def release(self):
        """Gives back one level of every name; raises the first failure."""
        _core.rlc_multilock_release(self._ptr)

    @property
    def names(self):
        """The distinct names, sorted as the library takes them."""
        return self._names

    def __len__(self):
        return _core.rlcswig_multilock_size(self._ptr)

    @property
    def owner(self):
        return self._owner

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        owner = "thread" if self._owner is None else self._owner
        return f"<redlockc.MultiLock {list(self._names)!r} owner={owner}>"
