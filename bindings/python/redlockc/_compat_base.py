"""What redlockc.compat's Lock and AsyncLock share: the redis-py connection's
settings as a node URI and TLS options, owners, the library's exceptions as
redis-py's, and the lock's state (compat.py, _compat_aio.py)."""
import itertools
import logging
import threading
import urllib.parse
import weakref

import redis.exceptions as _rx
from redis.exceptions import LockError, LockNotOwnedError

from ._errors import (AuthenticationError, ConnectionError, LockLostError, NotOwnerError,
                      ServerError, TimeoutError)

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
