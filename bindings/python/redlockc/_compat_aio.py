"""redlockc.compat.AsyncLock: redis.asyncio's Lock on a redlockc.asyncio client.

The same mapping as redlockc.compat.Lock (compat.py), awaited. The hold is
the library's; the redis.asyncio client is used only to read the key: the
token right after an acquire (``local.token`` is read without awaiting),
``owned()`` and ``locked()``, as redis.asyncio's Lock reads them.
"""
import asyncio
import weakref

import redis.asyncio.connection as _aconn
from redis.exceptions import LockError

from . import asyncio as _aio
from ._errors import Error, InvalidArgument, LockLostError, NotOwnerError
from ._compat_base import (_Base, _next_owner, _no_token, _tls_options, _translate, _uri,
                     _wait)

_clients = weakref.WeakKeyDictionary()  # redis.asyncio pool -> (its loop, weakly; client)


def async_client_for(redis_client):
    """The ``redlockc.asyncio.Client`` (format="classic") that ``AsyncLock``
    objects of this redis.asyncio client use on the running loop: one per
    connection pool and loop. Call it in a coroutine."""
    pool = redis_client.connection_pool
    loop = asyncio.get_running_loop()
    entry = _clients.get(pool)
    if entry is not None and entry[0]() is loop and not entry[1].closed:
        return entry[1]
    uri = _uri(pool, (_aconn.SSLConnection,))
    client = _aio.Client(uri, format="classic", **_tls_options(pool, uri.startswith("rediss:")))
    _clients[pool] = (weakref.ref(loop), client)
    return client


def _as_bytes(value):
    return value.encode() if isinstance(value, str) else value


class AsyncLock(_Base):
    """redis.asyncio's ``redis.asyncio.lock.Lock``, kept by a
    ``redlockc.asyncio.Client`` (classic format):
    ``r.lock(name, ..., lock_class=redlockc.compat.AsyncLock)``.
    See redlockc.compat for what differs from redis-py's."""

    async def acquire(self, blocking=None, blocking_timeout=None, token=None):
        """Takes the lock; True, or False if it stayed busy (redis.asyncio's
        signature; ``token`` must be None). Cancelling the awaiting task
        leaves nothing held."""
        _no_token(token)
        wait = _wait(self.blocking if blocking is None else blocking,
                     self.blocking_timeout if blocking_timeout is None else blocking_timeout)
        inner = async_client_for(self.redis).lock(self.name, _next_owner())
        try:
            taken = await inner.acquire(*wait, lease=self._lease())
        except InvalidArgument:
            raise
        except Error as e:
            raise _translate(e, self.name, "Cannot acquire the lock") from e
        if not taken:
            return False
        try:
            value = _as_bytes(await self.redis.get(self.name))
        except BaseException:
            # The caller never sees True: nobody else would release it.
            await _release_quietly(inner)
            raise
        self.local.inner, self.local.known = inner, value if inner.owned() else None
        return True

    def _read_token(self, inner):
        return None  # read at the acquire; nothing to await in an attribute

    async def release(self):
        """Releases the hold. LockError if not held here; LockNotOwnedError
        if the key no longer holds its token. Cancelled before its end, the
        hold stays this object's (release again)."""
        inner = self.local.inner
        if inner is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.",
                            lock_name=self.name)
        try:
            await inner.release()
        except Error as e:
            if isinstance(e, (LockLostError, NotOwnerError)):
                self.local.inner, self.local.known = None, None
            raise _translate(e, self.name, "Cannot release a lock that's no longer owned") from e
        self.local.inner, self.local.known = None, None

    def extend(self, additional_time, replace_ttl=False):
        """Adds ``additional_time`` seconds to the time left (``replace_ttl``:
        sets it); an awaitable of True. LockError (at once) if not held or
        made with timeout=None; LockNotOwnedError if the token is gone."""
        inner = self._check_extend("extend")
        return self._extend(inner, additional_time if replace_ttl else None, additional_time,
                            "Cannot extend a lock that's no longer owned")

    def reacquire(self):
        """Sets the time left back to ``timeout``; errors as extend()."""
        inner = self._check_extend("reacquire")
        return self._extend(inner, self.timeout, 0,
                            "Cannot reacquire a lock that's no longer owned")

    async def _extend(self, inner, seconds, added, not_owned):
        try:
            # validity: read when the extend runs, not when it was called.
            await inner.extend(inner.validity + added if seconds is None else seconds)
        except InvalidArgument:
            raise
        except Error as e:
            raise _translate(e, self.name, not_owned) from e
        return True

    async def locked(self):
        """True if anyone holds the lock (reads the key)."""
        return await self.redis.get(self.name) is not None

    async def owned(self):
        """True if the key holds this owner's token (reads the key)."""
        inner, token = self.local.inner, self.local.known
        if inner is None or token is None or not inner.owned():
            return False
        return _as_bytes(await self.redis.get(self.name)) == token

    async def __aenter__(self):
        if await self.acquire():
            return self
        raise self._not_acquired()

    async def __aexit__(self, *exc):
        try:
            await self.release()
        except LockError:
            if self._release_failed():
                raise


async def _release_quietly(inner):
    try:
        await inner.release()
    except Error:
        pass  # lost meanwhile, or I/O: it expires with its lease
