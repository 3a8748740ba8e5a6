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
import threading
import weakref

from redis.exceptions import LockError

from . import _client
from ._compat_base import (_PROBE_OWNER, _Base, _next_owner, _no_token, _tls_options,
                           _translate, _uri, _wait)
from ._errors import Error, InvalidArgument

__all__ = ["Lock", "AsyncLock", "client_for"]


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
