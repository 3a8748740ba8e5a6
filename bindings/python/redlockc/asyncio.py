"""redlockc.asyncio: the same locks for asyncio, on the event loop, with no threads.

Mirrors ``redis.asyncio``: the API of :mod:`redlockc` with ``await``::

    import redlockc.asyncio

    client = redlockc.asyncio.Client("redis://127.0.0.1:6379")
    async with client.lock("orders", timeout=5):     # NotAcquiredError after 5 s busy
        ...
    lock = client.lock("report")
    if await lock.acquire(timeout=5, lease=60):
        try: ...
        finally: await lock.release()
    await client.close()

It runs libredlockc's engine (the lock logic without I/O: the same Lua
scripts, wire format, watchdog and Redlock rules as the blocking API, so the
two exclude each other on one name) over asyncio sockets: one connection
per node for commands and one for unlock messages, one timer, no thread, no
polling. A waiting ``acquire()`` is a future woken by the unlock message;
ten thousand of them cost memory, not threads. Cancelling the task that
waits (``task.cancel()``, ``asyncio.wait_for``, ``asyncio.timeout``) stops
the wait and leaves nothing held.

Owners: a hold belongs to its owner in the client, never to a Lock
object. By default the owner is the task that calls ``acquire()`` (as the
blocking API's is the calling thread): two tasks exclude each other, also
through one shared Lock object; one task is reentrant, also through two
Lock objects of one name (``await client.lock("x").acquire()``, later
``await client.lock("x").release()``); a release from another task is
refused (NotOwnerError). ``owner=<int>`` is an explicit owner, for any task.
Collecting a Lock object leaves the hold alone. Times are seconds, as
everywhere in redlockc.
"""
import asyncio as _asyncio
import logging
import weakref

from . import redlockc_core as _core
from . import _aio, _metrics, _otel, _units
from ._client import _in_seconds, _node_list, _options, _shown, _split_nodes
from ._family import _count
from ._errors import (AuthenticationError, ClosedError, ConnectionError, Error,  # noqa: F401
                      InvalidArgument, LockLostError, NoQuorumError, NotAcquiredError,
                      NotOwnerError, OutOfMemoryError, ProtocolError, ServerError,
                      TimeoutError, error_for, invalid)
from ._units import lease_ms as _lease_ms
from ._units import lease_refused as _lease_refused
from ._units import wait_ms as _wait_ms

__all__ = ["Client", "Lock", "ReadWriteLock", "ReadLock", "WriteLock", "FairLock", "Semaphore",
           "PermitExpirableSemaphore", "MultiLock", "Error", "InvalidArgument", "OutOfMemoryError",
           "ConnectionError",
           "TimeoutError", "NotOwnerError", "LockLostError", "NoQuorumError", "ServerError",
           "ProtocolError", "ClosedError", "AuthenticationError", "NotAcquiredError"]

_log = logging.getLogger("redlockc")

# Owner ids made for tasks: 2**61 + n. Explicit owners stay below.
_AUTO_OWNER_BASE = 2**61

_OK = _core.RLC_OK
_NOT_ACQUIRED = _core.RLC_NOT_ACQUIRED
_E_CANCELED = _core.RLC_E_CANCELED
_acquire_kind = _core.rlcpy_engine_acquire_kind
_acquire_fair = _core.rlcpy_engine_acquire_fair
_acquire_multi = _core.rlcpy_engine_acquire_multi
_release_kind = _core.rlcpy_engine_release_kind
_extend = _core.rlcpy_engine_extend
_validity_ms_kind = _core.rlcpy_engine_validity_ms_kind
_hold_count_kind = _core.rlcpy_engine_hold_count_kind
# The engine's lock kinds this client runs, and what messages call them.
_KIND_LOCK = _core.RLC_KIND_LOCK
_KIND_READ = _core.RLC_KIND_READ
_KIND_WRITE = _core.RLC_KIND_WRITE
_KIND_FAIR = _core.RLC_KIND_FAIR
_NOUNS = {_KIND_LOCK: "lock", _KIND_READ: "read lock", _KIND_WRITE: "write lock",
          _KIND_FAIR: "fair lock"}
# What one multi-lock takes at most (rlc_engine_acquire_multi).
_MAX_MULTI_NAMES = 1024
# A fair waiter's thread wait without one given (Redisson's threadWaitTime,
# what the blocking FairLock's 0 means).
_DEFAULT_THREAD_WAIT_MS = 5000
# Semaphores (no lock: permits taken, given back, set and counted).
_KIND_SEMAPHORE = _core.RLC_KIND_SEMAPHORE
_KIND_PSEMAPHORE = _core.RLC_KIND_PSEMAPHORE
_acquire_permits = _core.rlcpy_engine_acquire_permits
_release_permits = _core.rlcpy_engine_release_permits
_set_permits = _core.rlcpy_engine_set_permits
_available_permits = _core.rlcpy_engine_available_permits
_permit_id = _core.rlcpy_engine_permit_id
_query = _core.rlcpy_engine_query
_force_release = _core.rlcpy_engine_force_release
_fenced_set = _core.rlcpy_engine_fenced_set
_forget = _core.rlcpy_engine_forget
_Q_LOCKED = _core.RLC_Q_LOCKED
_Q_TTL = _core.RLC_Q_TTL
_Q_MODE = _core.RLC_Q_MODE
# RLC_Q_MODE's answer: the mode a quorum of nodes agrees on (0: free).
_MODES = {0: None, 1: "read", 2: "write"}
# The owner a query or force release names (the engine wants a non-zero id;
# these rounds wait in no owner's queue): no task's, no explicit owner's.
_QUERY_OWNER = _AUTO_OWNER_BASE
_get_running_loop = _asyncio.get_running_loop
_current_task = _asyncio.current_task


def _option_ms(opts, name, default):
    """A time option back from the C option text (ms), for the driver's own use."""
    for part in (opts or "").split(";"):
        key, _, value = part.partition("=")
        if key == name:
            return int(value)
    return default


class Client:
    """A client of one Redis node, or of N independent masters (Redlock), for asyncio.

    ``Client(nodes, *, ssl_context=None, **options)``: the same nodes and
    options as :class:`redlockc.Client` (times in seconds; ``pool_size`` is
    accepted and has no effect: one pipelined connection per node carries
    every task's commands), and TLS to ``rediss://`` nodes: ``tls_ca_file``,
    ``tls_ca_dir``, ``tls_cert_file``, ``tls_key_file``, ``tls_server_name``,
    ``tls_verify`` (False: no certificate or name check), or an
    ``ssl.SSLContext`` of your own as ``ssl_context``. Making one does no I/O; it connects on first use, on the
    running event loop, and belongs to that loop from then on.

    ``await client.close()`` (or ``async with Client(...) as client:``) ends
    the waits still running (their ``acquire()`` raises ClosedError), lets
    releases and renewals in flight finish (at most ``timeout`` seconds,
    default io_timeout + connect_timeout), and closes the sockets. Holds
    still held are not released: they expire with their lease, as with the
    blocking client.
    """

    def __init__(self, nodes, *, ssl_context=None, **options):
        """See the class: nodes a URI or a list of URIs, options as keyword arguments."""
        uris = _node_list(nodes)
        opts = _options(options)
        connect_ms = _option_ms(opts, "connect_timeout_ms", 1000)
        self._close_bound_s = (_option_ms(opts, "io_timeout_ms", 1000) + connect_ms) / 1000
        try:
            self._driver = _aio.Driver(uris, opts, max(connect_ms, 1) / 1000, ssl_context)
        except InvalidArgument as e:
            raise _in_seconds(e, options) from None
        # Weakly: the driver outlives the client in its finalizer.
        self._driver.on_lost = weakref.WeakMethod(self._lost)
        # fencing=1: holds take tokens (the engine's grants carry them); off,
        # a grant's token is 0 and fencing_token refuses, as the C call does.
        self._fencing = int(_core.rlcpy_engine_option(self._driver.engine, "fencing") or 0) != 0
        self._nodes = _split_nodes(uris)
        self._loop = None
        self._closed = False
        self._next_owner = _AUTO_OWNER_BASE
        # Each task's owner id, for as long as the task lives (a task ended
        # with a hold leaves it held, as a thread does in the blocking API).
        self._tasks = weakref.WeakKeyDictionary()
        # (name, owner id, lock kind) -> _Hold, from the grant to the last release
        self._holds = {}
        self._stats = _metrics.Stats()  # what Prometheus reads beside the engine's counters
        # (lock kind, name) -> WeakSet of its Locks that have on_lost callbacks
        self._watchers = {}
        # Not closed: the engine is freed with the client (sockets with the loop).
        weakref.finalize(self, _free_engine, self._driver)

    def _bind(self):
        """The driver, on the running loop (the first one used); raises if closed."""
        loop = _get_running_loop()
        if loop is self._loop and not self._closed:
            return self._driver
        if loop is not self._loop:
            if self._loop is not None:
                raise RuntimeError("this redlockc.asyncio.Client belongs to another event loop "
                                   "(the one it was first used in): make one per loop")
            if self._closed:
                raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
            self._loop = loop
            self._driver.bind(loop)
        if self._closed:
            raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
        return self._driver

    def lock(self, name, owner=None, *, timeout=None, lease=None):
        """A :class:`Lock` for ``name`` (no I/O).

        owner: None (default): every call acts for the task that makes it
        (the current task); an int in [1, 2**61) is an explicit owner, the
        same from any task. timeout and lease are what ``async with lock:``
        waits and leases (seconds; None: wait as long as it takes, watchdog
        lease).
        """
        return Lock(self, name, owner, timeout=timeout, lease=lease)

    def rwlock(self, name, owner=None, *, timeout=None, lease=None):
        """A :class:`ReadWriteLock` for ``name`` (no I/O): ``async with
        client.rwlock(name).read():`` or ``.write():``. owner, timeout and
        lease as for :meth:`lock` (timeout and lease: what ``async with
        rw.read():`` and ``rw.write():`` wait and lease)."""
        return ReadWriteLock(self, name, owner, timeout=timeout, lease=lease)

    def fair_lock(self, name, owner=None, thread_wait=None, *, timeout=None, lease=None):
        """A :class:`FairLock` for ``name`` (no I/O): first come, first served;
        a client of one node only (InvalidArgument otherwise). owner, timeout
        and lease as for :meth:`lock`; thread_wait (seconds, default 5) as the
        blocking ``Client.fair_lock``'s: a waiter that stopped trying leaves
        the queue at most twice that after its last try."""
        return FairLock(self, name, owner, thread_wait, timeout=timeout, lease=lease)

    def semaphore(self, name, permits=None):
        """A :class:`Semaphore` for ``name`` (no I/O), the blocking
        ``Client.semaphore``'s: with ``permits``, the count is set if the
        semaphore has none, before this object's first call. A client of one
        node only (InvalidArgument otherwise)."""
        return Semaphore(self, name, permits)

    def permit_semaphore(self, name, permits=None):
        """A :class:`PermitExpirableSemaphore` for ``name`` (no I/O);
        ``permits`` as for :meth:`semaphore`."""
        return PermitExpirableSemaphore(self, name, permits)

    def multi_lock(self, names, owner=None, *, timeout=None, lease=None):
        """A :class:`MultiLock` of ``names`` (no I/O): every name or none, the
        blocking ``Client.multi_lock``'s; each name an ordinary Lock name.
        owner, timeout and lease as for :meth:`lock`."""
        return MultiLock(self, names, owner, timeout=timeout, lease=lease)

    def _new_owner(self):
        """An owner id of its own (a semaphore's acquire: the engine names the
        try's record by it; permits belong to no owner)."""
        self._next_owner += 1
        return self._next_owner

    def _task_owner(self, make):
        """The current task's owner id (made if `make`), or 0: no task, or
        (not `make`) a task that never asked for one, so holds nothing."""
        try:
            task = _current_task()
        except RuntimeError:  # no running loop (another thread)
            return 0
        if task is None:
            return 0
        owner = self._tasks.get(task)
        if owner is None:
            if not make:
                return 0
            self._next_owner += 1
            owner = self._tasks[task] = self._next_owner
        return owner

    async def fenced_set(self, key, value, token):
        """Writes ``value`` at ``key`` only if ``token`` is at least the fence stored with it.

        The fenced write at the resource that makes fencing tokens work, as
        :meth:`redlockc.Client.fenced_set`: a holder whose lock expired while
        it paused has a smaller token than the holder after it, and its late
        write is refused. ``token`` is ``lock.fencing_token`` (an int >= 1);
        ``value`` is bytes or a str (written as UTF-8). The key is used as
        given (no ``key_prefix``); its fence is the key
        ``"redlockc_fence:{key}"``. This client must have one node: the Redis
        that holds the resource (InvalidArgument otherwise).

        Returns True if written, False if refused (a larger token is stored;
        nothing was written). Raises InvalidArgument, ServerError (the fence
        key holds no token), ClosedError or an I/O error. The write runs to
        its end even if the awaiting task is cancelled; close() lets it finish.
        """
        key, value, token = _units.fenced_args(key, value, token)
        return await self._round(lambda e, now: _fenced_set(e, key, value, token, now)) == 1

    async def _round(self, start, sink=None):
        """The answer (its DONE event's count) of the one-shot round that
        ``start(engine, now)`` begins, or the exception of its status."""
        d = self._bind()
        ev = await d.start(_aio.QUERY, start(d.engine, d.now()), sink)
        if ev[1] != _OK:
            raise error_for(ev[1], ev[8] or None)
        return ev[7]

    def _forget(self, name, owner):
        """The lock holds (RLC_KIND_LOCK) of name by owner (0: by every task)
        end here quietly: no renewal, no loss report, no level left to
        release or nest in."""
        if owner:
            owners = [owner]
        else:
            owners = [o for (n, o, k) in self._holds
                      if n == name and k == _KIND_LOCK and o > _AUTO_OWNER_BASE]
        e = self._driver.engine
        for o in owners:
            hold = self._holds.pop((name, o, _KIND_LOCK), None)
            if hold is not None:
                span, hold.span = hold.span, None
                hold.cancel_tasks = None
                _otel.hold_ended(span)
            if e is not None:
                _forget(e, name, o, self._driver.now())

    def _done(self, kind, ev):
        """One of this client's operations ended (the driver, on the loop): its holds."""
        if kind == _aio.ACQUIRE:
            if ev[1] == _OK:
                key = (ev[4], ev[3], ev[_aio.EV_KIND])
                if ev[7] == 1 or key not in self._holds:  # a new hold, not a nested level
                    self._holds[key] = _Hold(ev[5])
        elif kind == _aio.RELEASE and ev[7] <= 0:
            hold = self._holds.pop((ev[4], ev[3], ev[_aio.EV_KIND]), None)
            if hold is not None:
                span, hold.span = hold.span, None
                _otel.hold_ended(span)

    def _lost(self, name, owner, status, message, kind=_KIND_LOCK):
        """The engine found owner's hold of (name, kind) lost: its signals, and
        the on_lost callbacks of the objects of that kind and name that act for
        that owner (a write hold's loss reaches no Lock of the name)."""
        self._stats.lost(status)
        noun = _NOUNS.get(kind, "lock")
        if not message:
            message = f"{noun} {name!r} was lost: it expired or was taken"
        _log.warning("%s", message)
        error = error_for(status, message)
        hold = self._holds.get((name, owner, kind))
        if hold is not None:
            span, hold.span = hold.span, None
            _otel.hold_ended(span, error)
            hold.was_lost(f"{noun} {name!r}", error)
        watchers = self._watchers.get((kind, name))
        if watchers is not None:
            for lk in list(watchers):
                lk._was_lost(owner, error)
            if not watchers:
                del self._watchers[(kind, name)]

    def _watch(self, lock):
        """lock has on_lost callbacks: it hears of its kind and name's losses."""
        key = (lock._kind, lock._name)
        watchers = self._watchers.get(key)
        if watchers is None:
            watchers = self._watchers[key] = weakref.WeakSet()
        watchers.add(lock)

    async def close(self, timeout=None):
        """Closes the client (idempotent); see the class. timeout: seconds to
        let work in flight finish (default io_timeout + connect_timeout)."""
        if self._closed:
            return
        if self._loop is not None and self._loop is not _get_running_loop():
            raise RuntimeError("close() must run on the client's event loop")
        self._closed = True
        bound = self._close_bound_s if timeout is None else timeout
        await self._driver.shutdown(bound)

    @property
    def closed(self):
        """True once close() was called."""
        return self._closed

    @property
    def uuid(self):
        """The client's random v4 UUID: hash fields it writes are ``"<uuid>:<owner>"``."""
        return self._driver.uuid

    @property
    def nodes(self):
        """The node URIs as given, passwords shown as ``***``."""
        return tuple(_shown(u) for u in self._nodes)

    @property
    def quorum(self):
        """How many nodes must agree: 1 for one node, N/2+1 for Redlock."""
        return len(self._nodes) // 2 + 1

    def metrics(self):
        """The client's counters since it was made, the dict of
        :meth:`redlockc.Client.metrics` (same keys; ``wait_buckets`` is
        ``[(le_seconds, count)]``, cumulative). No I/O, no loop needed: any
        thread may call it (every call into the engine holds the GIL).
        Raises ClosedError once the client is closed, as the blocking one does.
        """
        e = self._driver.engine
        if self._closed or e is None:
            raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
        return _metrics.read_engine(e)

    def _locks_held(self):
        """How many (name, owner) holds are held now (Prometheus's gauge)."""
        return len(self._holds)

    def prometheus(self, label="default"):
        """This client's Prometheus metrics in the text format, labelled
        ``client=<label>``, as :meth:`redlockc.Client.prometheus`;
        ``redlockc.register_metrics(client, label)`` takes asyncio clients too."""
        return _metrics.prometheus_text(self, label)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def __enter__(self):
        raise TypeError("redlockc.asyncio.Client is used with `async with`, not `with`")

    def __exit__(self, *exc):  # pragma: no cover (never entered)
        pass

    def __reduce__(self):
        raise TypeError("a redlockc.asyncio.Client cannot be pickled or sent to another "
                        "process: create one in that process")

    def __repr__(self):
        state = " closed" if self._closed else ""
        nodes = ",".join(_shown(u) for u in self._nodes)
        return f"<redlockc.asyncio.Client {nodes} uuid={self.uuid}{state}>"


class _Hold:
    """What the client keeps of one (name, owner)'s hold besides the engine's
    count: its fencing token and, once it is lost, why, and who hears it."""
    __slots__ = ("token", "lost_error", "event", "cancel_tasks", "span")

    def __init__(self, token):
        self.token = token
        self.span = None  # its OpenTelemetry span, started by the acquire that made it
        self.lost_error = None
        self.event = None  # the asyncio.Event of lock.lost, made when asked for
        self.cancel_tasks = None  # tasks to cancel when it is lost (cancel_on_lost)

    def was_lost(self, what, error):
        """what: the hold's kind and name, for messages ("lock 'x'")."""
        self.lost_error = error
        if self.event is not None:
            self.event.set()
        tasks, self.cancel_tasks = self.cancel_tasks, None
        for task in tasks or ():
            if not task.done():
                _cancel_task(task, f"{what} was lost")


class _Forgets:
    """What sees a force release's DONE: once the key is gone, the holds of
    the owners its Lock acts for end quietly (Client._forget). At the DONE,
    not when the caller resumes: a hold granted after the delete is not one
    it deleted, and a cancelled caller's holds end all the same."""
    __slots__ = ("client", "name", "owner")

    def __init__(self, client, name, owner):
        self.client, self.name, self.owner = client, name, owner

    def _done(self, kind, ev):
        if ev[1] == _OK:
            self.client._forget(self.name, self.owner)


def _free_engine(driver):
    e, driver.engine = driver.engine, None
    if e is not None:
        _core.rlcpy_engine_free(e)


class _KindLock:
    """What the engine's lock kinds share (Lock, ReadLock, WriteLock,
    FairLock): a hold of one (name, kind) by one owner of the client, its
    waits, levels, validity and loss. A subclass names its kind (RLC_KIND_*)
    and what it is called, and a FairLock how it starts an acquire."""


    __slots__ = ("_client", "_name", "_owner", "_owner_id", "_timeout", "_lease", "_lost_fns",
                 "__weakref__")
    _kind = _KIND_LOCK  # the engine's lock kind of the holds
    _noun = "lock"  # what messages call it

    def __init__(self, client, name, owner=None, *, timeout=None, lease=None):
        """See ``Client.lock()``."""
        if not isinstance(client, Client):
            raise TypeError(f"{type(self).__name__} needs a redlockc.asyncio.Client, "
                            f"not {type(client).__name__}")
        _units.text(name, "lock name")
        _wait_ms(True, timeout), _lease_ms(lease)  # checked now, not at the first `async with`
        self._client = client
        self._name = name
        self._owner = owner
        self._owner_id = 0  # 0: the current task's
        self._timeout = timeout
        self._lease = lease
        self._lost_fns = None
        if owner is not None:
            self._owner_id = _units.owner_id(owner)
            if self._owner_id >= _AUTO_OWNER_BASE:
                raise invalid(f"owner {owner} is too large: explicit owners of "
                              "redlockc.asyncio locks are 1 to 2**61-1")

    def _caller(self, make=True):
        """The owner id a call acts for now (0: no task; see Client._task_owner)."""
        return self._owner_id or self._client._task_owner(make)

    def _running_owner(self, owner):
        # Called outside a task (asyncio.run(lock.acquire())): the task that
        # runs the coroutine is the owner.
        owner = owner or self._caller()
        if not owner:
            raise RuntimeError(f"redlockc.asyncio.{type(self).__name__} needs a task to own its "
                               "hold (await it in one, or pass owner=<int>)")
        return owner

    # ---- acquiring and releasing ------------------------------------------------

    def acquire(self, blocking=True, timeout=None, lease=None):
        """Acquires the lock for this owner; returns (an awaitable of) True, or
        False if it stayed busy.

        The owner is taken when acquire() is called: with owner=None the
        calling task, also if another task awaits the result
        (``asyncio.wait_for``, ``asyncio.shield``, ``create_task``).

        blocking False tries once; timeout: seconds to wait at most (None or
        -1: no limit; 0: one try); lease: None (the watchdog renews it on the
        loop until release) or a fixed lease in seconds (no renewal). A nested
        acquire keeps the mode and lease of the first and refreshes that lease.

        Cancelling the awaiting task ends the wait and leaves nothing held.
        Raises ConnectionError, TimeoutError, NoQuorumError, ServerError,
        AuthenticationError, LockLostError (a nested acquire on a lost hold),
        ClosedError; InvalidArgument or TypeError for bad arguments.
        """
        # The defaults need no conversion (the hot path of `async with`).
        wait = -1 if blocking is True and timeout is None else _wait_ms(blocking, timeout)
        return self._acquire(self._caller(), wait, 0 if lease is None else _lease_ms(lease),
                             lease)

    async def _acquire(self, owner, wait, lease_ms, lease):
        d = self._client._bind()
        owner = self._running_owner(owner)
        try:
            op = self._start_acquire(d, owner, wait, lease_ms)
        except InvalidArgument as e:
            raise _lease_refused(e, lease) from None
        client = self._client
        stats = client._stats
        span = _otel.acquire_started(self._name)
        start, result, error = stats.enter(), "error", None
        fut = d.start(_aio.ACQUIRE, op, client)
        try:
            ev = await fut
        except BaseException as e:
            if isinstance(e, _asyncio.CancelledError):
                d.abandon(op, fut, client)
            error = e
            raise
        else:
            result = "acquired" if ev[1] == _OK else "busy" if ev[1] == _NOT_ACQUIRED else "error"
        finally:
            stats.leave(start, result)
            _otel.acquire_ended(span, result, error)
        status = ev[1]
        if status == _OK:
            hold = self._hold(owner)
            if hold is not None and hold.span is None and hold.lost_error is None:
                hold.span = _otel.hold_started(self._name)  # in the acquiring task's context
            return True
        if status == _NOT_ACQUIRED:
            return False
        if status == _E_CANCELED and client._closed:
            raise ClosedError(_core.RLC_E_CLOSED, "the client was closed while this waited")
        raise error_for(status, ev[8] or None)

    def _start_acquire(self, d, owner, wait, lease_ms):
        """The engine's acquire of this kind; its operation id."""
        return _acquire_kind(d.engine, self._kind, self._name, owner, wait, lease_ms, d.now())

    def release(self):
        """Releases one level of this owner's hold (the calling task's, with
        owner=None); at zero deletes it and wakes waiters.

        Raises NotOwnerError (this owner holds nothing: also when another task
        holds it), LockLostError (it held it, but the lock expired or was
        taken: nothing on the server is touched), or an I/O error. A release
        runs to its end in the engine even if the awaiting task is cancelled.
        """
        return self._release(self._caller())

    async def _release(self, owner):
        d = self._client._bind()
        owner = self._running_owner(owner)
        op = _release_kind(d.engine, self._kind, self._name, owner, d.now())
        ev = await d.start(_aio.RELEASE, op, self._client)
        if ev[1] != _OK:
            raise error_for(ev[1], ev[8] or None)

    # ---- `async with` -------------------------------------------------------------

    async def __aenter__(self):
        """``async with lock:`` acquires with the lock's timeout and lease;
        NotAcquiredError if the timeout ran out."""
        await self._enter(self._timeout, self._lease)
        return self

    async def _enter(self, timeout, lease):
        if not await self._acquire(self._caller(), _wait_ms(True, timeout), _lease_ms(lease),
                                   lease):
            raise NotAcquiredError(_core.RLC_NOT_ACQUIRED,
                                   f"{self._noun} {self._name!r} is busy: the wait of {timeout} s "
                                   "ran out")

    async def __aexit__(self, *exc):
        """Releases one level when the block ends, also when it raised."""
        await self._release(self._caller())

    def __call__(self, timeout=None, lease=None):
        """``async with lock(timeout=5, lease=None):`` one level for the block."""
        _wait_ms(True, timeout), _lease_ms(lease)
        return _Scoped(self, timeout, lease)

    def __enter__(self):
        raise TypeError("redlockc.asyncio.Lock is used with `async with`, not `with` "
                        "(nothing was acquired)")

    def __exit__(self, *exc):  # pragma: no cover (never entered)
        pass

    # ---- state (no I/O) -------------------------------------------------------------

    def _now_validity_ms(self, owner):
        """The engine's validity of owner's hold at this moment (0: not held)."""
        d = self._client._driver
        if not owner or d.engine is None or d.loop is None:
            return 0
        return _validity_ms_kind(d.engine, self._kind, self._name, owner, d.now())

    def _hold(self, owner):
        return self._client._holds.get((self._name, owner, self._kind)) if owner else None

    @property
    def hold_count(self):
        """This owner's hold count (0 when not held, also once its validity ran
        out). No I/O."""
        owner = self._caller(False)
        if self._now_validity_ms(owner) <= 0:
            return 0
        return _hold_count_kind(self._client._driver.engine, self._kind, self._name, owner)

    @property
    def validity(self):
        """Seconds (float) this owner's hold is still certainly held from now,
        by the loop's clock: the engine's figure (lease - time since the
        acquire or latest renewal was sent - drift), which each renewal moves
        on; 0.0 when not held, lost or run out. No I/O."""
        return self._now_validity_ms(self._caller(False)) / 1000

    def owned(self):
        """True if this owner holds it at this moment (its validity has not run
        out, whether or not the loss was reported yet). No I/O."""
        return self._now_validity_ms(self._caller(False)) > 0

    def _lost_of(self, hold):
        # The validity ran out before the engine's tick reported it (a loop
        # blocked past the lease): lost all the same.
        return hold.lost_error or LockLostError(
            _core.RLC_E_LOST, f"{self._noun} {self._name!r} was lost: its validity ran out")

    # ---- lost holds ------------------------------------------------------------------

    @property
    def lost(self):
        """An asyncio.Event, set when this owner's current hold is found lost
        (its validity ran out: a fixed lease ended or renewals failed; a
        renewal or loss push found the key or field gone). Each hold has its
        own; when this owner holds nothing, a new Event that is never set.
        ``await lock.lost.wait()``."""
        owner = self._caller(False)
        hold = self._hold(owner)
        if hold is None:
            return _asyncio.Event()
        if hold.event is None:
            hold.event = _asyncio.Event()
            if hold.lost_error is not None:
                hold.event.set()
        return hold.event

    @property
    def lost_error(self):
        """Why this owner's hold was lost (a LockLostError, or the I/O error
        that kept renewals out), or None (held, or nothing held)."""
        owner = self._caller(False)
        hold = self._hold(owner)
        if hold is None or (hold.lost_error is None and self._now_validity_ms(owner) > 0):
            return None
        return self._lost_of(hold)

    def on_lost(self, fn):
        """Calls ``fn(lock, error)`` on the event loop when a hold of this name
        by an owner this Lock acts for is lost (its explicit owner; with
        owner=None, any task's), as the blocking API's on_lost does for
        threads; returns fn (a decorator works). ``on_lost(None)`` removes
        every callback. An exception in fn goes to the loop's exception handler."""
        if fn is None:
            self._lost_fns = None
            return None
        if not callable(fn):
            raise TypeError(f"on_lost needs a callable or None, not {type(fn).__name__}")
        if self._lost_fns is None:
            self._lost_fns = []
        self._lost_fns.append(fn)
        self._client._watch(self)
        return fn

    def _was_lost(self, owner, error):
        """(name, owner)'s hold was lost: this Lock's callbacks, if it acts for owner."""
        if not self._lost_fns:
            return
        if self._owner_id:
            if owner != self._owner_id:
                return
        elif owner < _AUTO_OWNER_BASE:  # an explicit owner's, not a task's
            return
        loop = self._client._loop
        for fn in list(self._lost_fns):
            loop.call_soon(self._call_lost, fn, error)

    def _call_lost(self, fn, error):
        try:
            fn(self, error)
        except Exception as e:  # the loop's handler reports it; nothing else changes
            self._client._loop.call_exception_handler({
                "message": f"redlockc.asyncio: on_lost callback {fn!r} of {self!r} raised",
                "exception": e})

    def cancel_on_lost(self, task=None):
        """Cancels ``task`` (default: the current task) if this owner's hold (the
        calling task's, with owner=None) is lost before it is released to
        zero; at once if it was lost already. Returns a function that undoes
        the registration. The cancelled task sees CancelledError("lock
        '<name>' was lost"); ``lock.lost`` is set. Raises NotOwnerError when
        this owner holds nothing."""
        if task is None:
            task = _current_task()
            if task is None:
                raise RuntimeError("cancel_on_lost() needs a task (call it from one, or pass one)")
        owner = self._caller(False)
        hold = self._hold(owner)
        if hold is None:
            raise NotOwnerError(_core.RLC_E_NOT_OWNER,
                                f"cancel_on_lost: {self._noun} {self._name!r} is not held by "
                                "this owner")
        if hold.lost_error is not None or self._now_validity_ms(owner) <= 0:
            _cancel_task(task, f"{self._noun} {self._name!r} was lost")
            return lambda: None
        if hold.cancel_tasks is None:
            hold.cancel_tasks = []
        hold.cancel_tasks.append(task)

        def undo():
            if hold.cancel_tasks and task in hold.cancel_tasks:
                hold.cancel_tasks.remove(task)
        return undo

    # ---- identity ----------------------------------------------------------------------

    @property
    def name(self):
        """The lock's name, as given (the Redis key is key_prefix + name)."""
        return self._name

    @property
    def owner(self):
        """The explicit owner id, or None: the current task is the owner."""
        return self._owner

    @property
    def owner_id(self):
        """The owner id in the hash field ``"<client.uuid>:<owner_id>"`` that a
        call made now acts for (with owner=None the current task's, from
        2**61 up); None outside a task."""
        return self._caller() or None

    @property
    def client(self):
        return self._client

    def __reduce__(self):
        raise TypeError(f"a redlockc.asyncio.{type(self).__name__} cannot be pickled or sent to "
                        "another process")

    def __repr__(self):
        owner = "task" if self._owner is None else self._owner
        return f"<redlockc.asyncio.{type(self).__name__} {self._name!r} owner={owner}>"


class Lock(_KindLock):
    """A distributed, reentrant lock for asyncio (Redisson's layout, or Redlock).

    Made by ``client.lock(name, owner=None, *, timeout=None, lease=None)``.

    - ``await acquire(blocking=True, timeout=None, lease=None)`` -> True, or
      False if it stayed busy; ``await release()``; ``await extend(seconds)``;
      ``async with lock:`` / ``async with lock(timeout=5):`` (NotAcquiredError
      when busy).
    - owner: None (default): each call acts for the task that makes it (the
      task that calls ``acquire()``, also when another awaits it, as
      ``asyncio.wait_for`` does); an int: that explicit owner, from any task.
      A hold belongs to its owner in the client: any Lock object of the name
      and owner releases it; collecting this object changes nothing.
    - lease None: renewed on the event loop every watchdog_timeout/3 until
      release; seconds: a fixed lease, no renewal.
    - lost: ``on_lost(fn)`` calls ``fn(lock, error)`` on the loop; ``lost`` is
      an asyncio.Event set when the owner's hold is lost; ``cancel_on_lost(
      task=None)`` cancels a task (default: the current one) when it is.
    - ``owned()``, ``hold_count``, ``fencing_token``, ``validity``: the
      caller's owner's hold, from the engine's validity at the moment of the
      call (not held once it ran out, also before the loss is reported). No I/O.
    - ``await locked()`` (anyone holds it), ``await ttl()`` (the server's
      lease, seconds), ``await force_release()``: ask Redis, one round on the
      connections the locks use, as the blocking Lock's ``locked()``, ``ttl``
      and ``force_release()`` do.

    Cancelling a task that waits in ``acquire()`` ends the wait (in the engine)
    and leaves nothing held, also when the grant and the cancel cross.
    """

    __slots__ = ()

    # ---- Lock's own: extend, force release, fencing, what Redis says ------------------

    def extend(self, seconds):
        """Sets this owner's lease to ``seconds`` from now (a fixed lease; the
        watchdog stops), or with ``None`` hands the lock back to the watchdog.

        Raises NotOwnerError, LockLostError, or an I/O error.
        """
        return self._extend(self._caller(), _lease_ms(seconds, "extend's lease"), seconds)

    async def _extend(self, owner, ms, seconds):
        d = self._client._bind()
        owner = self._running_owner(owner)
        try:
            op = _extend(d.engine, self._name, owner, ms, d.now())
        except InvalidArgument as e:
            raise _lease_refused(e, seconds, "extend's lease") from None
        ev = await d.start(_aio.EXTEND, op, None)
        if ev[1] != _OK:
            raise error_for(ev[1], ev[8] or None)

    async def force_release(self):
        """Deletes the lock whoever holds it and wakes its waiters (an admin
        action). Succeeds whether or not it was held.

        As the blocking Lock forgets its handle's holds, the holds of this
        name that this Lock acts for end quietly: its explicit owner's, or
        with owner=None every task's in this client (what the blocking API's
        owner=None does for threads). They are not renewed, ``lost`` is not
        set, on_lost is not called; their ``release()`` raises NotOwnerError
        and the next ``acquire()`` makes a new hold. Other owners' holds of
        the name (another client's, or another explicit owner's here) are
        found gone by their next renewal: lost, on_lost, and LockLostError
        from their release. The round runs to its end even if the awaiting
        task is cancelled, and its holds end all the same.

        Raises ConnectionError, TimeoutError, NoQuorumError, ServerError or
        ClosedError; a round that raised forgets no hold.
        """
        sink = _Forgets(self._client, self._name, self._owner_id)
        name = self._name
        await self._client._round(lambda e, now: _force_release(e, name, _QUERY_OWNER, now),
                                  sink)

    async def locked(self):
        """True if anyone holds the lock (on a quorum of nodes). Asks Redis, on
        the connections the locks use (it sees what this client sent before)."""
        name = self._name
        return await self._client._round(
            lambda e, now: _query(e, name, _QUERY_OWNER, _Q_LOCKED, now)) != 0

    async def ttl(self):
        """The lock's remaining lease on the server in seconds (float), as
        Redis says it: None if nobody holds it, ``math.inf`` if it has no
        expiry. Over N nodes: the value a quorum of nodes has at least. Asks
        Redis. (A method to await; the blocking Lock's ``ttl`` is a property.)"""
        name = self._name
        ms = await self._client._round(lambda e, now: _query(e, name, _QUERY_OWNER, _Q_TTL, now))
        return _units.ttl_seconds(ms)

    @property
    def fencing_token(self):
        """The fencing token of this owner's current hold (an int, grows with
        each new holder). Needs the client option ``fencing=True``: without it
        raises InvalidArgument (no hold takes a token). Raises NotOwnerError
        when not held, LockLostError once lost or run out (until it is
        released). No I/O."""
        if not self._client._fencing:
            raise InvalidArgument(_core.RLC_E_INVAL,
                                  f"lock {self._name!r} has no fencing token: fencing is off "
                                  "(open the client with the option fencing=1)")
        owner = self._caller(False)
        hold = self._hold(owner)
        if hold is not None and self._now_validity_ms(owner) > 0:
            return hold.token
        if hold is not None:
            raise LockLostError(_core.RLC_E_LOST, str(self._lost_of(hold)))
        raise NotOwnerError(_core.RLC_E_NOT_OWNER,
                            f"lock {self._name!r} is not held by this owner")


class _RwSide(_KindLock):
    """A side of a :class:`ReadWriteLock` (ReadLock, WriteLock): the verbs
    of :class:`Lock` that every lock kind has, for one engine lock kind."""

    __slots__ = ("_rw",)

    def __init__(self, rw):
        super().__init__(rw.client, rw.name, rw.owner, timeout=rw._timeout, lease=rw._lease)
        self._rw = rw

    @property
    def rwlock(self):
        """The ReadWriteLock this is a side of."""
        return self._rw

    def __repr__(self):
        return f"<{self._noun[:-5]} side of {self._rw!r}>"


class ReadLock(_RwSide):
    """The read side of a :class:`ReadWriteLock` (``rw.read()``): many
    readers at once, no writer beside them; Redisson's RReadWriteLock layout
    (hash field ``"<uuid>:<owner>"``, mode ``read``, one timeout key
    ``"{name}:<uuid>:<owner>:rwlock_timeout:<level>"`` per level, channel
    ``redisson_rwlock:{name}``), on the engine as a Lock is.

    The verbs of :class:`WriteLock`. A reader waits while a writer holds the
    lock or waits for it (a waiting writer holds back new readers); the
    writer's release wakes every waiting reader at once. The write holder
    may take read levels (its own owner's, through ``rw.read()``); a reader
    that asks for the write side waits like anyone else. Cancelling the
    waiting task ends the wait and leaves nothing: no field, no timeout key.
    A read hold takes no fencing token and has no ``extend()``.
    """

    __slots__ = ()
    _kind = _KIND_READ
    _noun = "read lock"


class WriteLock(_RwSide):
    """The write side of a :class:`ReadWriteLock` (``rw.write()``): one
    holder, no reader beside it (but its own read levels); Redisson's
    RReadWriteLock layout (hash field ``"<uuid>:<owner>:write"``, mode
    ``write``, channel ``redisson_rwlock:{name}``), on the engine as a Lock is.

    The verbs of :class:`Lock` that every lock kind has: ``await
    acquire(blocking=True, timeout=None, lease=None)``, ``await release()``,
    ``async with`` (and ``async with w(timeout=5):``), ``hold_count``,
    ``validity``, ``owned()``, ``lost``, ``lost_error``, ``on_lost(fn)``,
    ``cancel_on_lost()``. Owners as for Lock (the calling task, or the
    rwlock's explicit owner); reentrant. A writer that waits holds back new
    readers (of any client) until it is granted or gives up. Cancelling the
    waiting task ends the wait and leaves nothing: no level, no place among
    the waiting writers. A write hold takes no fencing token and has no
    ``extend()`` (give a lease at acquire).
    """

    __slots__ = ()
    _kind = _KIND_WRITE
    _noun = "write lock"


class ReadWriteLock:
    """A Redisson-compatible read-write lock for asyncio: many readers or one writer.

    Made by ``client.rwlock(name, owner=None, *, timeout=None, lease=None)``;
    ``rw.read()`` is its read side, a :class:`ReadLock`, and ``rw.write()``
    its write side, a :class:`WriteLock` (``async with
    client.rwlock("x").read():``). Each side is an engine lock kind, its holds
    apart from the other side's and from a Lock's of the name (an owner's
    read and write levels are counted, released and lost apart). It
    excludes, and is excluded by, the read-write locks of the blocking
    client and of Redisson on one name. ``await rw.mode()`` asks Redis.
    """

    __slots__ = ("_client", "_name", "_owner", "_timeout", "_lease", "_read", "_write",
                 "__weakref__")

    def __init__(self, client, name, owner=None, *, timeout=None, lease=None):
        """See ``Client.rwlock()``."""
        self._client, self._name, self._owner = client, name, owner
        self._timeout, self._lease = timeout, lease
        self._write = WriteLock(self)  # checks every argument
        self._read = ReadLock(self)

    def read(self):
        """The read side (many readers, no writer), the same object each time."""
        return self._read

    def write(self):
        """The write side (one holder, no readers), the same object each time."""
        return self._write

    async def mode(self):
        """``None`` (free), ``"read"`` or ``"write"``: the hash's mode field
        that a quorum of nodes agrees on (None without agreement). Asks Redis,
        one round on the connections the locks use, as the blocking
        ``ReadWriteLock.mode`` (a property there) does."""
        name = self._name
        m = await self._client._round(lambda e, now: _query(e, name, _QUERY_OWNER, _Q_MODE, now))
        return _MODES.get(m)

    @property
    def name(self):
        return self._name

    @property
    def owner(self):
        """The explicit owner id, or None: the current task is the owner."""
        return self._owner

    @property
    def client(self):
        return self._client

    def __reduce__(self):
        raise TypeError("a redlockc.asyncio.ReadWriteLock cannot be pickled or sent to another "
                        "process")

    def __repr__(self):
        owner = "task" if self._owner is None else self._owner
        return f"<redlockc.asyncio.ReadWriteLock {self._name!r} owner={owner}>"


class FairLock(_KindLock):
    """A Redisson-compatible fair lock for asyncio: waiters get it in the
    order they came, across clients (RFairLock's layout: the lock's hash and
    field ``"<uuid>:<owner>"``, the queue ``redisson_lock_queue:{name}``, the
    timeouts ``redisson_lock_timeout:{name}``, each waiter's own channel
    ``redisson_lock__channel:{name}:<uuid>:<owner>``), on the engine
    (RLC_KIND_FAIR), so it excludes the blocking client's and Redisson's fair
    locks of the name.

    Made by ``client.fair_lock(name, owner=None, thread_wait=None, *,
    timeout=None, lease=None)``; a client of one node only (each node keeps
    its own queue, so no quorum shares an order): InvalidArgument otherwise.
    The verbs of :class:`Lock` that every lock kind has: ``await
    acquire(blocking=True, timeout=None, lease=None)``, ``await release()``,
    ``async with`` (and ``async with f(timeout=5):``), ``hold_count``,
    ``validity``, ``owned()``, ``lost``, ``lost_error``, ``on_lost(fn)``,
    ``cancel_on_lost()``. Owners as for Lock (the calling task, or the
    explicit owner); reentrant. Its holds are apart from a Lock's of the
    name: a fair hold's loss reaches only FairLocks of the name. A waiting
    acquire joins the queue and keeps its place by trying at least every
    half ``thread_wait``; the release wakes the first in line, by its own
    channel. Cancelling the waiting task ends the wait and leaves nothing:
    no place in the queue, no timeout. No fencing token and no ``extend()``
    (give a lease at acquire).
    """

    __slots__ = ("_thread_wait_ms",)
    _kind = _KIND_FAIR
    _noun = "fair lock"

    def __init__(self, client, name, owner=None, thread_wait=None, *, timeout=None, lease=None):
        """See ``Client.fair_lock()``."""
        super().__init__(client, name, owner, timeout=timeout, lease=lease)
        self._thread_wait_ms = (_DEFAULT_THREAD_WAIT_MS if thread_wait is None
                                else _lease_ms(thread_wait, "thread_wait"))
        if len(client._nodes) > 1:
            raise invalid(f"a fair lock over {len(client._nodes)} nodes is refused: each node "
                          "keeps its own queue, so no order is shared by a quorum and the FIFO "
                          "promise cannot hold (use one node, or client.lock for Redlock)")

    def _start_acquire(self, d, owner, wait, lease_ms):
        return _acquire_fair(d.engine, self._name, owner, wait, lease_ms, self._thread_wait_ms,
                             d.now())

    @property
    def thread_wait(self):
        """Seconds a queued waiter that stopped trying keeps its place (twice
        this, as Redisson counts)."""
        return self._thread_wait_ms / 1000


class _EngineSemaphore:
    """What the two semaphores share: a count of permits at ``name`` on the
    client's one node, taken and given back by the engine (RLC_KIND_SEMAPHORE
    or RLC_KIND_PSEMAPHORE). Nothing is bound to an owner or kept here but
    the name, and the count to set before the first call."""

    __slots__ = ("_client", "_name", "_initial", "_setting", "__weakref__")
    _kind = _KIND_SEMAPHORE
    _noun = "semaphore"

    def __init__(self, client, name, permits=None):
        """See ``Client.semaphore()``."""
        if not isinstance(client, Client):
            raise TypeError(f"{type(self).__name__} needs a redlockc.asyncio.Client, "
                            f"not {type(client).__name__}")
        _units.text(name, "semaphore name")
        if len(client._nodes) > 1:
            raise invalid(f"a {self._noun} over {len(client._nodes)} nodes is refused: a count "
                          "of permits cannot be voted on by a quorum, so more than the count "
                          "could be out at once (use one node)")
        self._client = client
        self._name = name
        # With permits given: set (if none) before the first call; None once set.
        self._initial = None if permits is None else _count(permits, "permits")
        self._setting = None  # the future of that set while it runs, or failed

    async def _ready(self):
        """The count given at construction is set (if the semaphore had none),
        once, before any other call of this object goes out. A set that failed
        raises here, and the next call tries again."""
        if self._initial is None:
            return
        setting = self._setting
        if setting is None or (setting.done() and (setting.cancelled()
                                                   or setting.exception() is not None)):
            setting = self._setting = _asyncio.ensure_future(self._set_initial())
        await _asyncio.shield(setting)

    async def _set_initial(self):
        await self._set(self._initial)
        self._initial = None

    def _set(self, n):
        kind, name = self._kind, self._name
        return self._client._round(lambda e, now: _set_permits(e, kind, name, n, now))

    async def try_set_permits(self, permits):
        """Sets the count to ``permits`` only if the semaphore has none; True
        if it did. Asks Redis."""
        return await self._set(_count(permits, "permits")) == 1

    async def available(self):
        """Free permits now (an expirable semaphore's ended leases given back
        first). Asks Redis. (A method to await; the blocking ``available`` is
        a property.)"""
        await self._ready()
        kind, name = self._kind, self._name
        return await self._client._round(lambda e, now: _available_permits(e, kind, name, now))

    async def _take(self, n, wait, lease_ms, lease):
        """The grant's DONE event, or None if too few permits were free for
        the whole wait. Cancelling the awaiting task ends the wait in the
        engine; a grant that crossed the cancel is given back (Driver.abandon)."""
        await self._ready()
        client = self._client
        d = client._bind()
        try:
            op = _acquire_permits(d.engine, self._kind, self._name, client._new_owner(), n, wait,
                                  lease_ms, d.now())
        except InvalidArgument as e:
            raise _lease_refused(e, lease) from None
        fut = d.start(_aio.ACQUIRE, op, None)
        try:
            ev = await fut
        except _asyncio.CancelledError:
            d.abandon(op, fut, None)
            raise
        status = ev[1]
        if status == _OK:
            return ev
        if status == _NOT_ACQUIRED:
            return None
        if status == _E_CANCELED and client._closed:
            raise ClosedError(_core.RLC_E_CLOSED, "the client was closed while this waited")
        raise error_for(status, ev[8] or None)

    async def _give_back(self, n, permit_id):
        """Gives back n plain permits, or an expirable grant's (permit_id).
        The round runs to its end even if the awaiting task is cancelled."""
        await self._ready()
        kind, name = self._kind, self._name
        await self._client._round(
            lambda e, now: _release_permits(e, kind, name, n, permit_id, now))

    @property
    def name(self):
        """The semaphore's name, as given (the Redis key is key_prefix + name)."""
        return self._name

    @property
    def client(self):
        return self._client

    def __enter__(self):
        raise TypeError(f"redlockc.asyncio.{type(self).__name__} is used with `async with`, "
                        "not `with` (nothing was acquired)")

    def __exit__(self, *exc):  # pragma: no cover (never entered)
        pass

    def __reduce__(self):
        raise TypeError(f"a redlockc.asyncio.{type(self).__name__} cannot be pickled or sent to "
                        "another process")

    def __repr__(self):
        return f"<redlockc.asyncio.{type(self).__name__} {self._name!r}>"


class Semaphore(_EngineSemaphore):
    """A Redisson-compatible semaphore (RSemaphore) for asyncio: a count of
    free permits at the key ``name``, its waiters woken by the channel
    ``redisson_sc:{name}``, so it shares its permits with the blocking
    client's and Redisson's semaphores of the name. On the engine
    (RLC_KIND_SEMAPHORE): a waiting acquire is a future, no thread.

    Made by ``client.semaphore(name, permits=None)``; a client of one node
    only (InvalidArgument otherwise). The blocking ``Semaphore``'s names:
    ``await try_set_permits(n)``, ``await available()`` (a method here),
    ``await acquire(permits=1, blocking=True, timeout=None)`` -> True, or
    False if too few were free for the whole wait, ``await
    release(permits=1)``, ``async with sem:`` (one permit). Not bound to an
    owner: any task, thread or process may release. A holder that dies does
    not give its permits back: use :class:`PermitExpirableSemaphore` for
    that. Cancelling a waiting task ends the wait and keeps nothing (a grant
    that crossed the cancel is given back).
    """

    __slots__ = ()

    def acquire(self, permits=1, blocking=True, timeout=None):
        """Takes ``permits`` free permits, waiting for them (timeout: seconds;
        None or -1: no limit; 0 or blocking=False: one try); an awaitable of
        True, or False if too few were free for the whole wait. Raises
        ConnectionError, TimeoutError, ServerError, ClosedError;
        InvalidArgument or TypeError for bad arguments."""
        n, wait = _count(permits, "permits"), _wait_ms(blocking, timeout)
        return self._acquire(n, wait)

    async def _acquire(self, n, wait):
        return await self._take(n, wait, 0, None) is not None

    def release(self, permits=1):
        """Gives ``permits`` back and wakes waiters (an awaitable)."""
        return self._give_back(_count(permits, "permits"), None)

    async def __aenter__(self):
        """``async with sem:`` takes one permit, waiting as long as it takes."""
        await self._acquire(1, -1)
        return self

    async def __aexit__(self, *exc):
        """Gives the permit back when the block ends, also when it raised."""
        await self._give_back(1, None)


class PermitExpirableSemaphore(_EngineSemaphore):
    """A Redisson-compatible RPermitExpirableSemaphore for asyncio: permits
    with a lease (the count at the key ``name``, the zset ``{name}:timeout``
    of permits taken scored with their lease's end, the channel
    ``redisson_sc:{name}``), on the engine (RLC_KIND_PSEMAPHORE), shared with
    the blocking client's and Redisson's of the name.

    Made by ``client.permit_semaphore(name, permits=None)``; a client of one
    node only. The blocking ``PermitExpirableSemaphore``'s names: ``await
    try_set_permits(n)``, ``await available()`` (a method here), ``await
    acquire(permits=1, blocking=True, timeout=None, lease=...)`` -> the
    permit id (a str of 32 hex digits) or None if none came in time, ``await
    release(permit_id)`` (LockLostError if the lease ran out first: the
    permits were back in the pool), ``async with sem.permit(lease=10) as
    permit_id:``. Never more than the count out at once, even if holders die
    or stall. Cancelling a waiting task ends the wait and keeps nothing.
    """

    __slots__ = ()
    _kind = _KIND_PSEMAPHORE
    _noun = "permit-expirable semaphore"

    def acquire(self, permits=1, blocking=True, timeout=None, lease=None):
        """Takes ``permits`` under one id with a lease (seconds, required),
        waiting for them (timeout as for ``Semaphore.acquire``); an awaitable
        of the permit id, or None if none came in time."""
        if lease is None:
            raise invalid("a permit needs a lease in seconds (expirable permits have no "
                          "watchdog)")
        n, wait = _count(permits, "permits"), _wait_ms(blocking, timeout)
        return self._acquire(n, wait, _lease_ms(lease), lease)

    async def _acquire(self, n, wait, lease_ms, lease):
        ev = await self._take(n, wait, lease_ms, lease)
        if ev is None:
            return None
        return _permit_id(self._client._driver.engine, ev[5], ev[7])

    def release(self, permit_id):
        """Gives back the permits of ``permit_id`` (an awaitable); raises
        LockLostError if their lease ran out first (or they went back already)."""
        return self._give_back(0, _units.text(permit_id, "permit id"))

    def permit(self, permits=1, timeout=None, lease=None):
        """``async with sem.permit(lease=10) as permit_id:`` takes a permit
        (TimeoutError if none came within ``timeout``) and gives it back."""
        if lease is None:
            raise invalid("a permit needs a lease in seconds (expirable permits have no "
                          "watchdog)")
        _count(permits, "permits"), _wait_ms(True, timeout), _lease_ms(lease)
        return _Permit(self, permits, timeout, lease)


class _Permit:
    """``async with sem.permit(...) as permit_id:``."""
    __slots__ = ("_sem", "_args", "_id")

    def __init__(self, sem, permits, timeout, lease):
        self._sem, self._args, self._id = sem, (permits, True, timeout, lease), None

    async def __aenter__(self):
        self._id = await self._sem.acquire(*self._args)
        if self._id is None:
            raise TimeoutError(_core.RLC_E_TIMEOUT,
                               f"no permit of {self._sem.name!r} came within the timeout")
        return self._id

    async def __aexit__(self, *exc):
        pid, self._id = self._id, None
        await self._sem.release(pid)


class MultiLock:
    """Several Lock names held together, all or none, for asyncio (Redisson's
    RedissonMultiLock as the blocking :class:`redlockc.MultiLock` takes it):
    on the engine, one script per node checks every name and takes them all
    or writes nothing, so two overlapping multi-locks never deadlock and it
    excludes the blocking client's and Redisson's locks of those names.

    Made by ``client.multi_lock(names, owner=None, *, timeout=None,
    lease=None)``. ``await acquire(blocking=True, timeout=None, lease=None)``
    -> True, or False if a name stayed busy; ``await release()`` (one level
    of every name; every name is released, the first failure raises);
    ``async with ml:`` / ``async with ml(timeout=5):`` (NotAcquiredError
    when busy); ``names`` (distinct, sorted by their UTF-8 bytes, the order
    they are taken in), ``len(ml)``, ``owned()``, ``lost_error``. Owners as
    for Lock (the calling task, or the explicit owner). Each name is then a
    level of that owner's Lock hold of it: renewed, lost and released name
    by name, its loss reported as a Lock's (logged, ``client.lock(name)``'s
    ``lost``/``on_lost``/``cancel_on_lost``). Cancelling the waiting task
    ends the wait and leaves no name held. No fencing token.
    """

    __slots__ = ("_client", "_names", "_owner", "_owner_id", "_timeout", "_lease",
                 "__weakref__")
    _noun = "multi-lock"

    def __init__(self, client, names, owner=None, *, timeout=None, lease=None):
        """See ``Client.multi_lock()``."""
        if not isinstance(client, Client):
            raise TypeError(f"MultiLock needs a redlockc.asyncio.Client, "
                            f"not {type(client).__name__}")
        if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
            raise TypeError("names must be an iterable of str")
        names = [_units.text(n, "lock name") for n in names]
        if not names:
            raise invalid("a multi-lock needs at least one name")
        self._names = tuple(sorted(set(names), key=lambda n: n.encode("utf-8")))
        if len(self._names) > _MAX_MULTI_NAMES:
            raise invalid(f"a multi-lock takes 1 to {_MAX_MULTI_NAMES} names, "
                          f"not {len(self._names)}")
        _wait_ms(True, timeout), _lease_ms(lease)
        self._client = client
        self._owner = owner
        self._owner_id = 0  # 0: the current task's
        self._timeout = timeout
        self._lease = lease
        if owner is not None:
            self._owner_id = _units.owner_id(owner)
            if self._owner_id >= _AUTO_OWNER_BASE:
                raise invalid(f"owner {owner} is too large: explicit owners of "
                              "redlockc.asyncio locks are 1 to 2**61-1")

    _caller = _KindLock._caller
    _running_owner = _KindLock._running_owner

    def acquire(self, blocking=True, timeout=None, lease=None):
        """Takes every name (one level each) or none; returns (an awaitable of)
        True, or False if a name stayed busy. blocking, timeout and lease as
        for :meth:`Lock.acquire`. Cancelling the awaiting task ends the wait
        and leaves no name held (a grant that crossed the cancel is given
        back, name by name)."""
        wait = -1 if blocking is True and timeout is None else _wait_ms(blocking, timeout)
        return self._acquire(self._caller(), wait, 0 if lease is None else _lease_ms(lease),
                             lease)

    async def _acquire(self, owner, wait, lease_ms, lease):
        client = self._client
        d = client._bind()
        owner = self._running_owner(owner)
        try:
            op = _acquire_multi(d.engine, list(self._names), owner, wait, lease_ms, d.now())
        except InvalidArgument as e:
            raise _lease_refused(e, lease) from None
        sink = _MultiHolds(client, self._names)
        stats = client._stats
        start, result = stats.enter(), "error"
        fut = d.start(_aio.ACQUIRE, op, sink)
        try:
            ev = await fut
        except _asyncio.CancelledError:
            d.abandon(op, fut, sink)
            raise
        else:
            result = "acquired" if ev[1] == _OK else "busy" if ev[1] == _NOT_ACQUIRED else "error"
        finally:
            stats.leave(start, result)
        status = ev[1]
        if status == _OK:
            return True
        if status == _NOT_ACQUIRED:
            return False
        if status == _E_CANCELED and client._closed:
            raise ClosedError(_core.RLC_E_CLOSED, "the client was closed while this waited")
        raise error_for(status, ev[8] or None)

    def release(self):
        """Releases one level of every name for this owner, the last name
        first, all at once; every name is released even if one fails, and the
        first failure in that order raises (NotOwnerError, LockLostError, an
        I/O error). Runs to its end even if the awaiting task is cancelled."""
        return self._release(self._caller())

    async def _release(self, owner):
        client = self._client
        d = client._bind()
        owner = self._running_owner(owner)
        results = []  # per name, last first: a future of its DONE, or the refusal
        for name in reversed(self._names):
            try:
                op = _release_kind(d.engine, _KIND_LOCK, name, owner, d.now())
            except Error as e:
                results.append(e)
                continue
            results.append(d.start(_aio.RELEASE, op, client))
        futs = [r for r in results if not isinstance(r, Error)]
        if futs:
            # shielded: a cancelled caller leaves the releases running
            await _asyncio.shield(_asyncio.gather(*futs, return_exceptions=True))
        for r in results:
            if isinstance(r, Error):
                raise r
            ev = r.exception() or r.result()
            if isinstance(ev, BaseException):
                raise ev
            if ev[1] != _OK:
                raise error_for(ev[1], ev[8] or None)

    async def __aenter__(self):
        """``async with ml:`` takes every name with the object's timeout and
        lease; NotAcquiredError if the timeout ran out."""
        await self._enter(self._timeout, self._lease)
        return self

    async def _enter(self, timeout, lease):
        if not await self._acquire(self._caller(), _wait_ms(True, timeout), _lease_ms(lease),
                                   lease):
            raise NotAcquiredError(_core.RLC_NOT_ACQUIRED,
                                   f"multi-lock {list(self._names)!r} is busy: the wait of "
                                   f"{timeout} s ran out")

    async def __aexit__(self, *exc):
        """Releases one level of every name when the block ends, also when it raised."""
        await self._release(self._caller())

    def __call__(self, timeout=None, lease=None):
        """``async with ml(timeout=5, lease=None):`` one level of every name for the block."""
        _wait_ms(True, timeout), _lease_ms(lease)
        return _Scoped(self, timeout, lease)

    def __enter__(self):
        raise TypeError("redlockc.asyncio.MultiLock is used with `async with`, not `with` "
                        "(nothing was acquired)")

    def __exit__(self, *exc):  # pragma: no cover (never entered)
        pass

    def _validity_ms(self, owner):
        d = self._client._driver
        if not owner or d.engine is None or d.loop is None:
            return 0
        now = d.now()
        return min(_validity_ms_kind(d.engine, _KIND_LOCK, n, owner, now) for n in self._names)

    def owned(self):
        """True if this owner holds every name at this moment. No I/O."""
        return self._validity_ms(self._caller(False)) > 0

    @property
    def lost_error(self):
        """Why a name of this owner's hold was lost (the first such name's
        LockLostError or I/O error), or None (every name held, or none held)."""
        owner = self._caller(False)
        if not owner:
            return None
        holds = self._client._holds
        found = [holds.get((n, owner, _KIND_LOCK)) for n in self._names]
        for n, hold in zip(self._names, found):
            if hold is not None and hold.lost_error is not None:
                return hold.lost_error
        if any(h is not None for h in found) and self._validity_ms(owner) <= 0:
            return LockLostError(_core.RLC_E_LOST,
                                 f"multi-lock {list(self._names)!r} was lost: its validity ran out")
        return None

    @property
    def names(self):
        """The distinct names, sorted as the engine takes them."""
        return self._names

    def __len__(self):
        return len(self._names)

    @property
    def owner(self):
        """The explicit owner id, or None: the current task is the owner."""
        return self._owner

    @property
    def owner_id(self):
        """The owner id a call made now acts for (None outside a task)."""
        return self._caller() or None

    @property
    def client(self):
        return self._client

    def __reduce__(self):
        raise TypeError("a redlockc.asyncio.MultiLock cannot be pickled or sent to another process")

    def __repr__(self):
        owner = "task" if self._owner is None else self._owner
        return f"<redlockc.asyncio.MultiLock {list(self._names)!r} owner={owner}>"


class _MultiHolds:
    """What sees a multi-lock acquire's DONE (the event names only the first
    name): a grant is a Lock hold of every name, kept by the client as a
    Lock's (losses, Prometheus); a grant nobody awaits any more is given back
    name by name."""
    __slots__ = ("client", "names")

    def __init__(self, client, names):
        self.client, self.names = client, names

    def _done(self, kind, ev):
        if kind != _aio.ACQUIRE or ev[1] != _OK:
            return
        client, owner = self.client, ev[3]
        e = client._driver.engine
        for name in self.names:
            key = (name, owner, _KIND_LOCK)
            if key not in client._holds or _hold_count_kind(e, _KIND_LOCK, name, owner) == 1:
                client._holds[key] = _Hold(0)  # a new hold, not a nested level

    def give_back(self, ev):
        d = self.client._driver
        for name in reversed(self.names):
            d.release_level(name, ev[3], self.client, _KIND_LOCK)


def _cancel_task(task, why):
    try:
        task.cancel(why)
    except TypeError:  # Python 3.8: no message
        task.cancel()


class _Scoped:
    """``async with lock(timeout=..., lease=...):``: one level for the block."""
    __slots__ = ("_lock", "_timeout", "_lease")

    def __init__(self, lock, timeout, lease):
        self._lock, self._timeout, self._lease = lock, timeout, lease

    async def __aenter__(self):
        await self._lock._enter(self._timeout, self._lease)
        return self._lock

    async def __aexit__(self, *exc):
        lock = self._lock
        await lock._release(lock._caller())
