# Type stubs for redlockc.compat: redis-py's lock_class on the classic format.
# Times are seconds (int or float).
from types import TracebackType
from typing import Any, Literal, Optional, Union

from . import Client
from .asyncio import Client as AsyncClient

__all__: list[str]

_Seconds = Union[int, float]
_Name = Union[str, bytes, memoryview]

class _State:
    @property
    def token(self) -> Optional[bytes]: ...

class _Base:
    redis: Any
    name: str
    timeout: Optional[_Seconds]
    sleep: _Seconds
    blocking: bool
    blocking_timeout: Optional[_Seconds]
    thread_local: bool
    raise_on_release_error: bool
    local: _State
    def __init__(
        self,
        redis: Any,
        name: _Name,
        timeout: Optional[_Seconds] = ...,
        sleep: _Seconds = ...,
        blocking: bool = ...,
        blocking_timeout: Optional[_Seconds] = ...,
        thread_local: bool = ...,
        raise_on_release_error: bool = ...,
    ) -> None: ...

class Lock(_Base):
    def acquire(
        self,
        sleep: Optional[_Seconds] = ...,
        blocking: Optional[bool] = ...,
        blocking_timeout: Optional[_Seconds] = ...,
        token: None = ...,
    ) -> bool: ...
    def release(self) -> None: ...
    def extend(self, additional_time: _Seconds, replace_ttl: bool = ...) -> Literal[True]: ...
    def reacquire(self) -> Literal[True]: ...
    def locked(self) -> bool: ...
    def owned(self) -> bool: ...
    def __enter__(self) -> "Lock": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class AsyncLock(_Base):
    async def acquire(
        self,
        blocking: Optional[bool] = ...,
        blocking_timeout: Optional[_Seconds] = ...,
        token: None = ...,
    ) -> bool: ...
    async def release(self) -> None: ...
    async def extend(self, additional_time: _Seconds, replace_ttl: bool = ...) -> Literal[True]: ...
    async def reacquire(self) -> Literal[True]: ...
    async def locked(self) -> bool: ...
    async def owned(self) -> bool: ...
    async def __aenter__(self) -> "AsyncLock": ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

def client_for(redis_client: Any) -> Client: ...
def async_client_for(redis_client: Any) -> AsyncClient: ...
