"""Client: the connection to one Redis node (single-instance locks) or N (Redlock)."""
import math
import os
import re
import threading
import weakref

from . import redlockc_core as _core
from . import _metrics, _otel, _units
from ._errors import ClosedError, InvalidArgument, invalid
from ._family import FamilyClientMixin
from ._lock import Lock, _Handle, _LostDispatch
from ._units import owner_id as _owner_id


def _option_table():
    """The C library's one option table (rlc_option_describe): name -> (kind,
    range text). Client()'s keywords are made from it: a *_ms option is also
    taken without "_ms", in seconds; an int option of 0..1 is a switch
    (True/False); text and choice options are str."""
    table, i = {}, 0
    while (line := _core.rlc_option_describe(i)) is not None:
        name, kind, rng, _default = line.split(" ", 3)
        table[name] = (kind, rng)
        i += 1
    return table


_TABLE = _option_table()
# Keyword options in seconds, and the C names (in ms) they stand for.
_TIME_OPTIONS = {n[:-3]: n for n in _TABLE if n.endswith("_ms")}
# On/off switches: True/False (or 1/0).
_SWITCH_OPTIONS = tuple(n for n, (k, r) in _TABLE.items() if k == "int" and r == "0..1")
# Paths: str or os.PathLike.
_PATH_OPTIONS = tuple(n for n in _TABLE if n.startswith("tls_") and n.endswith(("_file", "_dir")))


def _node_list(nodes):
    """A URI, or an iterable of URIs (list, tuple, generator...) -> the C library's
    comma-separated text."""
    if isinstance(nodes, str):
        uris = [nodes]
    elif isinstance(nodes, (bytes, bytearray)) or not hasattr(nodes, "__iter__"):
        # bytes iterate as ints: refused as a whole, like any non-iterable.
        raise TypeError("nodes must be a URI string or an iterable of them, "
                        f"not {type(nodes).__name__}")
    else:
        uris = list(nodes)
        if not uris:
            raise invalid("nodes must name at least one Redis node")
    for uri in uris:
        _units.text(uri, "node URI")
    return ",".join(uris)


def _split_nodes(uris):
    """The comma-separated text -> one URI per node: a piece without a scheme
    continues the one before it (a cluster's seeds, a sentinel list, a
    password holding a comma)."""
    out = []
    for piece in uris.split(","):
        if out and "://" not in piece:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return tuple(out)


def _text_value(name, value):
    if name in _PATH_OPTIONS:
        value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if ";" in value or "\0" in value:
        raise invalid(f"{name} must not contain ';' or NUL characters")
    _units.text(value or "-", name)  # UTF-8 check; "" is allowed where the range is
    return value


def _option_text(name, value):
    if name in _TIME_OPTIONS:
        return _TIME_OPTIONS[name], _units.option_ms(name, value)
    kind = _TABLE.get(name, (None,))[0]
    if kind is None:
        known = ", ".join(sorted([n for n in _TABLE if not n.endswith("_ms")] + list(_TIME_OPTIONS)))
        raise TypeError(f"Client() got an unexpected keyword argument {name!r} (options: {known}; "
                        "or the C names in ms: " + ", ".join(sorted(_TIME_OPTIONS.values())) + ")")
    if name in _SWITCH_OPTIONS:
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise TypeError(f"{name} must be True or False, not {value!r}")
        return name, "1" if value else "0"
    if kind == "int":
        # a C name in ms (as in its docs), or a count
        unit = " (milliseconds)" if name.endswith("_ms") else ""
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int{unit}, not {type(value).__name__}")
        return name, str(value)
    if kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
        if not math.isfinite(value):
            raise invalid(f"{name} must be finite, got {value!r}")
        # Plain decimals: the C parser takes digits and '.', never "1e-05".
        return name, f"{float(value):.12f}".rstrip("0").rstrip(".") or "0"
    # text and choice (the C library names the choices when one is wrong)
    return name, _text_value(name, value)


def _options(options):
    """Keyword options -> "name=value;..." for rlc_client_new, or None for none."""
    parts = []
    for name, value in options.items():
        if value is None:  # None: the library's default, as if not given
            continue
        c_name, text = _option_text(name, value)
        parts.append(f"{c_name}={text}")
    return ";".join(parts) or None


def _in_seconds(error, options):
    """The C library's complaint about a time option, told in Client()'s seconds.

    It names the option in ms ("option io_timeout_ms must be an integer
    from 1 to 3600000"); the caller gave io_timeout in seconds.
    """
    for py_name, c_name in _TIME_OPTIONS.items():
        value = options.get(py_name)
        if value is None or c_name not in error.detail:
            continue
        bounds = re.search(r"from (\d+) to (\d+)", error.detail)
        if bounds:
            low, high = (int(b) / 1000 for b in bounds.groups())
            return invalid(f"{py_name} must be from {low:g} to {high:g} seconds, "
                           f"got {value!r} ({error.detail})")
        return invalid(f"{py_name}={value!r} seconds: {error.detail}")
    return error


def _free_client(ptr, log_dispatch):
    # rlc_client_free joins the watchdog thread, which may still hand over a
    # log line: the dispatcher is an argument here so that it outlives that.
    _core.rlc_client_free(ptr)
    del log_dispatch


def _shown(uri):
    """A URI without its password, for repr()."""
    scheme, sep, rest = uri.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return uri
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}"


class Client(FamilyClientMixin):
    """A client of one Redis node, or of N independent masters (Redlock).

    ``Client(nodes, **options)``

    nodes: ``"redis://[[user]:password@]host[:port][/db]"``,
    ``"unix://[[user]:password@]/path.sock[?db=N]"`` or
    ``"redis-sentinel://[[user]:password@]host:port[,host:port...]/master[/db]"``
    (the master that the listed sentinels name), or an iterable of them
    (a list, a tuple...; or one string of comma-separated URIs, as in
    ``REDLOCKC_NODES``).
    One node gives Redisson-compatible single-instance locks; N >= 2
    independent masters give Redlock (a lock needs N/2+1 of them).

    Options (keyword arguments; times in seconds, int or float; ``None``
    means the default):

    - ``watchdog_timeout``: lease of watchdog locks, renewed every third (30)
    - ``io_timeout``: deadline of one call to a single node (1)
    - ``node_timeout``: per-node deadline of a Redlock call (0.05)
    - ``connect_timeout``: added to a call that must (re)connect (1)
    - ``retry_jitter``: random delay before a Redlock retry (0.05)
    - ``drift_factor``: clock drift allowance, a fraction of the lease (0.01)
    - ``pool_size``: accepted, no effect since 1.2 (one command connection per node)
    - ``key_prefix``: prepended to every lock name (``""``)
    - ``fencing``: True gives each new hold a fencing token
      (``lock.fencing_token``), from the counter ``redisson_lock_token:{name}``,
      a key that stays on the server after the lock is released (one per lock
      name: it keeps the tokens growing). False (default): no token, and a
      released lock leaves no key
    - ``format``: the layout of locks on the server: ``"redisson"`` (default;
      Redisson's hash, reentrant, pub/sub wake-up) or ``"classic"`` (one string
      key holding a random token, set with SET NX PX, as redis-py's ``Lock``,
      node-redlock, redsync and pottery use it: not reentrant, no fencing
      tokens, and refused by the lock family)
    - ``sentinel_user``, ``sentinel_password``: AUTH to the sentinels of
      redis-sentinel:// nodes (the URI's password is the data nodes')
    - ``tls_ca_file``, ``tls_ca_dir``, ``tls_cert_file``, ``tls_key_file``,
      ``tls_server_name``, ``tls_verify`` (bool): TLS to ``rediss://`` nodes,
      verified against the system's CAs by default

    The C library's names of the time options (``watchdog_timeout_ms=10000``...)
    are accepted too, in whole milliseconds.

    Connections are made lazily, on first use. A client may be shared by any
    number of threads. ``close()`` (or ``with Client(...) as c:``) stops its
    watchdog and closes its connections; locks still held are not released
    on the server (they expire with their lease), and every later call on
    this client's locks raises ``ClosedError``.

    A client does not survive ``fork()``: in a child process (for example a
    multiprocessing worker started by fork) create a new one; the parent's
    raises ``ClosedError`` there.
    """

    def __init__(self, nodes, **options):
        """See the class: nodes a URI or a list of URIs, options as keyword arguments."""
        uris = _node_list(nodes)
        opts = _options(options)
        self._mu = threading.Lock()  # guards _ptr and _handles
        self._stats = _metrics.Stats()  # what Prometheus reads beside the C counters
        self._ptr = None
        self._handles = {}  # (name, owner) -> _Handle: holds belong to the client
        try:
            self._ptr = _core.rlc_client_new(uris, opts)
        except InvalidArgument as e:
            raise _in_seconds(e, options) from None
        self._uuid = _core.rlc_client_uuid(self._ptr)
        self._nodes = _split_nodes(uris)
        # The library's log lines go to the "redlockc" logger (silent until
        # logging is configured); the dispatcher lives until the client is freed.
        log_dispatch = _metrics.LogDispatch(self._uuid)
        _core.rlcpy_set_log(self._ptr, _core.RLC_LOG_DEBUG, log_dispatch)
        # Freed once: by close(), by garbage collection, or at interpreter exit
        # (so that no watchdog thread calls into a finalizing interpreter).
        self._finalizer = weakref.finalize(self, _free_client, self._ptr, log_dispatch)

    def lock(self, name, owner=None, *, timeout=-1, lease=None):
        """A Lock handle for ``name`` (no network I/O).

        ``with client.lock("x", timeout=5, lease=None):`` acquires it for the
        block (NotAcquiredError after ``timeout`` seconds busy) and releases
        it at the end; timeout and lease are only what ``with lock:`` uses.

        name: the lock's name, a non-empty str (the Redis key, after
        key_prefix). owner: None (default) makes every call act for the
        calling thread, like ``threading.RLock``; an int in [1, 2**62) makes
        every call act for that explicit owner from any thread (an asyncio
        task, a request). Thread owners get ids from 2**62 up, so the two
        never meet.
        """
        return Lock(self, name, owner, timeout=timeout, lease=lease)

    def _new_handle(self, name, owner):
        """The shared handle of (name, owner), made by rlc_lock_new if there is none,
        under _mu, so that close() cannot free the client meanwhile."""
        name = _units.text(name, "lock name")
        owner_id = _owner_id(owner)
        key = (name, owner_id)
        with self._mu:
            if self._ptr is None:
                raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
            handle = self._handles.get(key)
            if handle is None:
                handle = _Handle(_core.rlc_lock_new(self._ptr, name, owner_id), key)
                # Every loss is at least logged, with or without callbacks.
                handle.dispatch = _LostDispatch(name, self._stats)
                _core.rlcpy_on_lost(handle.ptr, handle.dispatch)
                self._handles[key] = handle
            handle.users += 1
            return handle

    def _count_level(self, handle, delta):
        """Levels held through a handle: +1 acquired, -1 released, None: none left."""
        ended = None
        with self._mu:
            before = handle.levels
            handle.levels = 0 if delta is None else max(0, handle.levels + delta)
            if before == 0 and handle.levels > 0:  # a new hold: its span, in this context
                handle.dispatch.hold_span = _otel.hold_started(handle.key[0])
            elif before > 0 and handle.levels == 0:
                ended, handle.dispatch.hold_span = handle.dispatch.hold_span, None
            drop = handle.users == 0 and handle.levels == 0
            if drop:
                self._forget(handle)
        _otel.hold_ended(ended)  # outside the lock: an SDK may export here
        if drop:
            handle.free()

    def _release_handle(self, handle):
        """A Lock object is gone: free its handle if nothing else needs it."""
        with self._mu:
            handle.users -= 1
            drop = handle.users == 0 and (handle.levels == 0 or self._ptr is None)
            if drop:
                self._forget(handle)
        if drop:
            handle.free()

    def _forget(self, handle):
        if self._handles.get(handle.key) is handle:
            del self._handles[handle.key]

    def _set_on_lost(self, lock, handle, fn):
        with self._mu:
            dispatch = handle.dispatch
            if dispatch is None:  # freed (the client was closed)
                return
            if fn is None:
                dispatch.callbacks.pop(id(lock), None)
            else:
                dispatch.callbacks[id(lock)] = (weakref.ref(lock), fn)

    def held(self):
        """The (name, owner) pairs this client holds levels of, as far as it knows
        (owner None: thread owners). No network I/O."""
        with self._mu:
            return sorted((name, None if owner == 0 else owner)
                          for (name, owner), h in self._handles.items() if h.levels > 0)

    def _locks_held(self):
        """How many (name, owner) holds have levels now (Prometheus's gauge)."""
        with self._mu:
            return sum(1 for h in self._handles.values() if h.levels > 0)

    def fenced_set(self, key, value, token):
        """Writes ``value`` at ``key`` only if ``token`` is at least the fence stored with it.

        The fenced write at the resource that makes fencing tokens work: a
        holder whose lock expired while it paused has a smaller token than
        the holder after it, and its late write is refused. ``token`` is
        ``lock.fencing_token`` (an int >= 1); ``value`` is bytes or a str
        (written as UTF-8). The key is used as given (no ``key_prefix``); its
        fence is the key ``"redlockc_fence:{key}"``. This client must have one
        node: the Redis that holds the resource.

        Returns True if written, False if refused (a larger token is stored;
        nothing was written). Raises InvalidArgument, ServerError (the fence
        key holds no token) or an I/O error. close() waits for a call in
        progress.
        """
        key, value, token = _units.fenced_args(key, value, token)
        with self._mu:
            if self._ptr is None:
                raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
            return _core.rlc_fenced_set(self._ptr, key, value, token)

    def close(self):
        """Closes the client (idempotent): stops its watchdog thread, closes its connections.

        Held locks are not released: they expire on the server with their
        lease. Threads waiting in acquire() on its locks raise ClosedError,
        and so does every later call on them.
        """
        with self._mu:
            ptr, self._ptr = self._ptr, None
            # Handles no Lock object uses any more (kept for their holds): the
            # holds expire with their lease now, as the class says.
            orphans = [h for h in self._handles.values() if h.users == 0]
            for h in orphans:
                self._forget(h)
        if ptr is not None:
            self._finalizer()  # rlc_client_free, with the GIL released
        for h in orphans:
            h.free()

    @property
    def closed(self):
        """True once close() was called."""
        return self._ptr is None

    @property
    def uuid(self):
        """The client's random v4 UUID: hash fields it writes are ``"<uuid>:<owner>"``."""
        return self._uuid

    @property
    def nodes(self):
        """The node URIs as given, passwords shown as ``***``."""
        return tuple(_shown(u) for u in self._nodes)

    @property
    def quorum(self):
        """How many nodes must agree: 1 for one node, N/2+1 for Redlock."""
        return len(self._nodes) // 2 + 1

    def metrics(self):
        """The client's counters since it was made (no network I/O), a dict:

        ``acquires`` (got the lock), ``busy`` (stayed busy), ``waits`` (found
        it busy and waited), ``renewals`` (watchdog renewals), ``lost`` (holds
        found lost), ``reconnects``, ``script_reloads`` (scripts a node lost, loaded again),
        ``wait_seconds_sum`` and ``wait_buckets``: ``[(le_seconds, count)]``,
        cumulative, the waits that took at most ``le`` (the last is inf).
        """
        with self._mu:
            if self._ptr is None:
                raise ClosedError(_core.RLC_E_CLOSED, "the client is closed")
            return _metrics.read(self._ptr)

    def prometheus(self, label="default"):
        """This client's Prometheus metrics in the text format
        (``prometheus_client`` renders it when it is importable), labelled
        ``client=<label>``; ``redlockc.register_metrics(client, label)``
        serves them with the application's other metrics."""
        return _metrics.prometheus_text(self, label)

    def __enter__(self):
        """``with Client(...) as client:`` closes it when the block ends."""
        return self

    def __exit__(self, *exc):
        """Closes the client (locks still held expire with their lease)."""
        self.close()

    def __reduce__(self):
        """Refused: a client's connections and watchdog thread belong to its process."""
        raise TypeError("a redlockc.Client cannot be pickled or sent to another process: "
                        "create one in that process")

    def __repr__(self):
        state = " closed" if self.closed else ""
        nodes = ",".join(_shown(u) for u in self._nodes)
        return f"<redlockc.Client {nodes} uuid={self._uuid}{state}>"
