"""redlockc: distributed locks on Redis, over the libredlockc C library.

Redisson-compatible reentrant locks kept alive by a watchdog on one Redis
node, and the Redlock algorithm over N independent masters; one API::

    import redlockc

    client = redlockc.Client("redis://127.0.0.1:6379")
    with client.lock("orders"):
        ...

    lock = client.lock("report")
    if lock.acquire(timeout=5):          # seconds
        try: ...
        finally: lock.release()

Times are seconds (int or float) everywhere. Failures raise subclasses of
redlockc.Error, one per C status code; a busy lock is not an error
(acquire() returns False). See help(redlockc.Client) and help(redlockc.Lock).
"""
from . import redlockc_core as _core
from ._client import Client
from ._errors import (AuthenticationError, CancelledError, ClosedError, ConnectionError, Error, InvalidArgument,
                      LockLostError, NoQuorumError, NotAcquiredError, NotOwnerError,
                      OutOfMemoryError, ProtocolError, ServerError, TimeoutError)
from ._lock import Lock
from ._family import (FairLock, MultiLock, PermitExpirableSemaphore, ReadWriteLock,  # noqa: E402
                      Semaphore)
from ._metrics import Collector, prometheus_text, register_metrics, unregister_metrics

# Shown as redlockc.X in help(), tracebacks and pickles (where users name them).
for _cls in (Client, Lock, Collector, Error, InvalidArgument, OutOfMemoryError, ConnectionError,
             TimeoutError, NotOwnerError, LockLostError, NoQuorumError, ServerError,
             ProtocolError, ClosedError, AuthenticationError, CancelledError, NotAcquiredError,
             ReadWriteLock,
             FairLock, Semaphore, PermitExpirableSemaphore, MultiLock):
    _cls.__module__ = __name__
del _cls

#: The version of libredlockc this module runs on.
__version__ = _core.rlc_version()


def thread_owner():
    """The owner id of the calling thread (never 0, never reused in this process).

    A lock made with owner=None writes the hash field
    ``f"{client.uuid}:{redlockc.thread_owner()}"`` for this thread.
    """
    return _core.rlc_thread_owner()


__all__ = [
    "Client", "Lock", "thread_owner", "Collector", "prometheus_text", "register_metrics",
    "unregister_metrics",
    "Error", "InvalidArgument", "OutOfMemoryError", "ConnectionError", "TimeoutError",
    "NotOwnerError", "LockLostError", "NoQuorumError", "ServerError", "ProtocolError",
    "ClosedError", "AuthenticationError", "CancelledError", "NotAcquiredError",
    "ReadWriteLock", "FairLock", "Semaphore", "PermitExpirableSemaphore", "MultiLock",
]
