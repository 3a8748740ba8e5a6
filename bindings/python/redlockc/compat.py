"""redlockc.compat: redis-py's Lock, kept by libredlockc in the classic format.

``Lock`` and ``AsyncLock`` are drop-in ``lock_class=`` arguments of redis-py's
``Redis.lock()`` and ``redis.asyncio.Redis.lock()``::

    import redis
    from redlockc.compat import Lock

    r = redis.Redis(host="127.0.0.1", port=6379)
    with r.lock("orders", timeout=10, blocking_timeout=5, lock_class=Lock):
        ...

The constructor, the methods (acquire, release, extend, reacquire, locked,
owned, ``with``), the attributes (``name``, ``timeout``, ``local.token``...)
and the exceptions (redis-py's own ``LockError`` and ``LockNotOwnedError``)
are redis-py's. The key is redis-py's too: one string at the lock's name
holding a random token, so redis-py's Lock, node-redlock, redsync and these
exclude each other on the same names. Underneath, a ``redlockc.Client`` (or
``redlockc.asyncio.Client``) with ``format="classic"``, one per redis-py
connection pool, made from the pool's connection settings, does the work:
the library's attempts (a late command never touches a later holder's key),
its waiting (woken at once by this library's releases, every 100 ms by the
others') and its watchdog.

Where redis-py and these differ (the Python README, "redis-py's Lock on
libredlockc: redlockc.compat", says why):

- ``timeout=None``: the watchdog renews the key's TTL (``watchdog_timeout``,
  30 s) until release, so it ends at most that long after the process died;
  redis-py's key then has no TTL at all.
- The token is the library's attempt id (``"<client uuid>:<attempt>"``):
  ``acquire(token=...)`` raises NotImplementedError, and ``local.token`` is
  read from the server (blocking Lock: on first use; AsyncLock: right after
  the acquire), not assigned.
- ``sleep`` is not used: waiting is the library's (see above).
- ``extend(t)`` adds ``t`` to what the library knows is certainly left
  (``validity``: the lease, less the time since it was confirmed and the
  drift allowance), never more than the server's TTL.
"""
import itertools
import logging
import threading
import urllib.parse
import weakref

import redis.exceptions as _rx
from redis.exceptions import LockError, LockNotOwnedError

from . import _client
from ._errors import (AuthenticationError, ConnectionError, Error, InvalidArgument,
                      LockLostError, NotOwnerError, ServerError, TimeoutError)

__all__ = ["Lock", "AsyncLock", "client_for"]

_log = logging.getLogger(__name__)

# Each acquire gets an owner of its own, as each redis-py acquire gets a token
# of its own: two Lock objects (or two threads sharing one with
# thread_local=False) contend, and one object acquiring twice waits for
# itself, as redis-py's does. Below 2**61: valid for redlockc.asyncio too.
_owners = itertools.count(1)
_OWNER_LIMIT = 2**61
_PROBE_OWNER = _OWNER_LIMIT - 1  # locked()'s handle: it takes nothing


def _next_owner():
    owner = next(_owners)
    if owner >= _PROBE_OWNER:  # pragma: no cover (2**61 acquires)
        raise OverflowError("redlockc.compat ran out of owner ids")
    return owner


# ---- redis-py's client -> a redlockc client of the same server ----------------------

def _uri(pool, ssl_classes):
    """The node URI of a redis-py connection pool (host, port, db, user,
    password; unix socket path; rediss:// for its SSL connection class)."""
    if hasattr(pool, "service_name") or not hasattr(pool, "connection_kwargs"):
        raise TypeError("redlockc.compat needs a standalone redis-py client "
                        f"(a connection pool of one server), not {type(pool).__name__}")
    kw = pool.connection_kwargs
    user, password = kw.get("username"), kw.get("password")
    provider = kw.get("credential_provider")
    if provider is not None:
        creds = provider.get_credentials()
        user, password = (None, creds[0]) if len(creds) == 1 else creds
    auth = ""
    if password:
        auth = f"{_quote(user or '')}:{_quote(password)}@"
    elif user:
        auth = f"{_quote(user)}:@"
    db = int(kw.get("db") or 0)
    if kw.get("path"):
        return f"unix://{auth}{kw['path']}" + (f"?db={db}" if db else "")
    scheme = "rediss" if issubclass(pool.connection_class, ssl_classes) else "redis"
    host = kw.get("host") or "localhost"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{scheme}://{auth}{host}:{int(kw.get('port') or 6379)}/{db}"


def _quote(text):
    if isinstance(text, bytes):
        text = text.decode()
    return urllib.parse.quote(str(text), safe="")


def _tls_options(pool, tls):
    """redis-py's ssl_* connection settings -> the library's tls_* options."""
    if not tls:
        return {}
    kw = pool.connection_kwargs
    opts = {"tls_ca_file": kw.get("ssl_ca_certs"), "tls_ca_dir": kw.get("ssl_ca_path"),
            "tls_cert_file": kw.get("ssl_certfile"), "tls_key_file": kw.get("ssl_keyfile")}
    reqs = kw.get("ssl_cert_reqs", "required")
    if reqs in ("none", 0) or getattr(reqs, "name", "") == "CERT_NONE":
        opts["tls_verify"] = False
    return {k: v for k, v in opts.items() if v is not None}


def _sync_ssl_classes():
    import redis.connection
    return (redis.connection.SSLConnection,)


_sync_clients = weakref.WeakKeyDictionary()  # redis-py pool -> redlockc.Client
_sync_clients_lock = threading.Lock()


def client_for(redis_client):
    """The ``redlockc.Client`` (format="classic") that blocking ``Lock``
    objects of this redis-py client use: one per connection pool, closed
    when the pool is collected. Options of the library (``watchdog_timeout``
    ...) are its defaults."""
    pool = redis_client.connection_pool
    with _sync_clients_lock:
        client = _sync_clients.get(pool)
        if client is None or client.closed:
            uri = _uri(pool, _sync_ssl_classes())
            client = _client.Client(uri, format="classic",
                                    **_tls_options(pool, uri.startswith("rediss:")))
            _sync_clients[pool] = client
            weakref.finalize(pool, client.close)
        return client


# ---- the library's exceptions -> redis-py's ----------------------------------------

def _translate(error, name, not_owned):
    """The redis-py exception for a redlockc.Error (raised `from` it).

    A hold that is gone (LockLostError, NotOwnerError) is redis-py's
    LockNotOwnedError; I/O failures are redis-py's classes of the same
    meaning, so a caller's ``except redis.ConnectionError`` still works.
    """
    if isinstance(error, (LockLostError, NotOwnerError)):
        return LockNotOwnedError(f"{not_owned}: {error}", lock_name=name)
    if isinstance(error, AuthenticationError):
        return _rx.AuthenticationError(str(error))
    if isinstance(error, ConnectionError):
        return _rx.ConnectionError(str(error))
    if isinstance(error, TimeoutError):
        return _rx.TimeoutError(str(error))
    if isinstance(error, ServerError):
        return _rx.ResponseError(str(error))
    return LockError(str(error), lock_name=name)


def _checked_name(name):
    """redis-py takes str or bytes names; the library UTF-8 text."""
    if isinstance(name, (bytes, bytearray, memoryview)):
        return bytes(name).decode("utf-8")
    if not isinstance(name, str):
        raise TypeError(f"lock name must be str or bytes, not {type(name).__name__}")
    return name


def _no_token(token):
    if token is not None:
        raise NotImplementedError(
            "redlockc.compat locks write the library's own token (its attempt id, "
            "read back as lock.local.token): acquire(token=...) is not supported")


def _wait(blocking, blocking_timeout):
    """redis-py's blocking/blocking_timeout -> the library's (blocking, timeout)."""
    if not blocking:
        return False, -1
    if blocking_timeout is None:
        return True, -1  # as long as it takes
    return True, max(blocking_timeout, 0)  # redis-py: a negative one tries once


class _State:
    """One owner's hold as a Lock object sees it (per thread with
    thread_local=True): the library's lock of the acquire that took it, and
    its token once read. ``token`` is redis-py's ``lock.local.token``."""

    def __init__(self, lock_ref):
        self._lock = lock_ref  # weakly: threading.local keeps its arguments
        self.inner = None  # the redlockc Lock of the acquire that holds it
        self.known = None  # the token, once read from the server

    @property
    def token(self):
        """The value this hold wrote at the key (bytes), None when not held."""
        if self.inner is None:
            return None
        if self.known is None:
            lock = self._lock()
            self.known = lock._read_token(self.inner) if lock is not None else None
        return self.known

    @token.setter
    def token(self, value):
        # Forgetting a hold here would leave it held (and renewed) with
        # nobody to release it: the token is the library's, read-only.
        raise AttributeError("redlockc.compat locks hold the library's own token: "
                             "lock.local.token is read-only (release() ends the hold)")


class _ThreadState(_State, threading.local):
    """_State, one per thread (redis-py's thread_local=True)."""


class _Base:
    """What Lock and AsyncLock share: redis-py's constructor and attributes."""

    def __init__(self, redis, name, timeout=None, sleep=0.1, blocking=True,
                 blocking_timeout=None, thread_local=True, raise_on_release_error=True):
        """redis-py's Lock constructor (see help(redis.lock.Lock)); ``sleep``
        is kept but not used: the library wakes waiters itself."""
        self.redis = redis
        self.name = _checked_name(name)
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        me = weakref.ref(self)
        self.local = _ThreadState(me) if self.thread_local else _State(me)

    def _lease(self):
        # redis-py sets no expiry for a timeout of None (or 0): the watchdog's turn.
        return self.timeout if self.timeout else None

    def _check_extend(self, verb):
        if self.local.inner is None:
            raise LockError(f"Cannot {verb} an unlocked lock", lock_name=self.name)
        if self.timeout is None:
            raise LockError(f"Cannot {verb} a lock with no timeout", lock_name=self.name)
        return self.local.inner

    def _not_acquired(self):
        return LockError("Unable to acquire lock within the time specified",
                         lock_name=self.name)

    def _release_failed(self):
        if self.raise_on_release_error:
            return True
        _log.warning("Lock was unlocked or no longer owned when exiting context manager.")
        return False

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__name__} {self.name!r}>"


class Lock(_Base):
    """redis-py's ``redis.lock.Lock``, kept by a ``redlockc.Client`` (classic format).

    ``r.lock(name, timeout=None, sleep=0.1, blocking=True,
    blocking_timeout=None, lock_class=redlockc.compat.Lock, thread_local=True)``.
    Times are seconds. See the module's docstring for what differs.
    """

    def acquire(self, sleep=None, blocking=None, blocking_timeout=None, token=None):
        """Takes the lock; True, or False if it stayed busy (redis-py's signature).

        blocking (default: the constructor's): False tries once.
        blocking_timeout (default: the constructor's): seconds to wait at
        most; None waits as long as it takes. ``sleep`` is not used;
        ``token`` must be None (NotImplementedError otherwise).
        """
        _no_token(token)
        wait = _wait(self.blocking if blocking is None else blocking,
                     self.blocking_timeout if blocking_timeout is None else blocking_timeout)
        inner = _client.Lock(client_for(self.redis), self.name, _next_owner())
        try:
            taken = inner.acquire(*wait, lease=self._lease())
        except InvalidArgument:
            raise
        except Error as e:
            raise _translate(e, self.name, "Cannot acquire the lock") from e
        if taken:
            self.local.inner, self.local.known = inner, None
        return taken

    def _read_token(self, inner):
        # The library chose the value; read it, and keep it only if this hold
        # still owned the key after the read (then it was its own value).
        value = self.redis.get(self.name)
        if value is None or not inner.owned():
            return None
        return value.encode() if isinstance(value, str) else value

    def release(self):
        """Releases this owner's hold and deletes the key.

        LockError if it holds nothing here; LockNotOwnedError if the key no
        longer holds its token (expired, or taken; nothing is touched)."""
        inner = self.local.inner
        if inner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.",
                            lock_name=self.name)
        self.local.inner, self.local.known = None, None
        try:
            inner.release()
        except Error as e:
            raise _translate(e, self.name, "Cannot release a lock that's no longer owned") from e

    def extend(self, additional_time, replace_ttl=False):
        """Adds ``additional_time`` seconds to the time left (``replace_ttl``:
        sets it to that). LockError if not held or made with timeout=None;
        LockNotOwnedError if the key no longer holds its token."""
        inner = self._check_extend("extend")
        try:
            inner.extend(additional_time if replace_ttl else inner.validity + additional_time)
        except InvalidArgument:
            raise
        except Error as e:
            raise _translate(e, self.name, "Cannot extend a lock that's no longer owned") from e
        return True

    def reacquire(self):
        """Sets the time left back to ``timeout``; errors as extend()."""
        inner = self._check_extend("reacquire")
        try:
            inner.extend(self.timeout)
        except Error as e:
            raise _translate(e, self.name, "Cannot reacquire a lock that's no longer owned") from e
        return True

    def locked(self):
        """True if anyone holds the lock (asks Redis)."""
        try:
            return _client.Lock(client_for(self.redis), self.name, _PROBE_OWNER).locked()
        except Error as e:
            raise _translate(e, self.name, "Cannot ask") from e

    def owned(self):
        """True if the key holds this owner's token (asks Redis)."""
        inner = self.local.inner
        if inner is None:
            return False
        try:
            return inner.owned()
        except Error as e:
            raise _translate(e, self.name, "Cannot ask") from e

    def __enter__(self):
        if self.acquire():
            return self
        raise self._not_acquired()

    def __exit__(self, *exc):
        try:
            self.release()
        except LockError:
            if self._release_failed():
                raise


from ._compat_aio import AsyncLock, async_client_for  # noqa: E402  (uses the helpers above)

AsyncLock.__module__ = async_client_for.__module__ = __name__  # where users name them

__all__.append("async_client_for")
