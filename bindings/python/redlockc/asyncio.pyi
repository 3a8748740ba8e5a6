# Type stubs for redlockc.asyncio. Times are seconds (int or float).
import asyncio
import os
from types import TracebackType
import ssl
from typing import Any, Callable, Iterable, Literal, Optional, TypeVar, Union

from . import (AuthenticationError, ClosedError, ConnectionError, Error, InvalidArgument,
               LockLostError, NoQuorumError, NotAcquiredError, NotOwnerError, OutOfMemoryError,
               ProtocolError, ServerError, TimeoutError)

__all__: list[str]

_Seconds = Union[int, float]
_Path = Union[str, os.PathLike[str]]
_F = TypeVar("_F", bound=Callable[["Lock", Error], object])

class Client:
    def __init__(
        self,
        nodes: Union[str, Iterable[str]],
        *,
        ssl_context: Optional[ssl.SSLContext] = ...,
        watchdog_timeout: Optional[_Seconds] = ...,
        io_timeout: Optional[_Seconds] = ...,
        node_timeout: Optional[_Seconds] = ...,
        connect_timeout: Optional[_Seconds] = ...,
        retry_jitter: Optional[_Seconds] = ...,
        sync_timeout: Optional[_Seconds] = ...,
        drift_factor: Optional[float] = ...,
        pool_size: Optional[int] = ...,
        sync_replicas: Optional[int] = ...,
        key_prefix: Optional[str] = ...,
        loss_push: Optional[bool] = ...,
        restart_guard: Optional[bool] = ...,
        fencing: Optional[bool] = ...,
        format: Optional[Literal["redisson", "classic"]] = ...,
        tls_ca_file: Optional[_Path] = ...,
        tls_ca_dir: Optional[_Path] = ...,
        tls_cert_file: Optional[_Path] = ...,
        tls_key_file: Optional[_Path] = ...,
        tls_server_name: Optional[str] = ...,
        tls_verify: Optional[bool] = ...,
        sentinel_user: Optional[str] = ...,
        sentinel_password: Optional[str] = ...,
        watchdog_timeout_ms: Optional[int] = ...,
        io_timeout_ms: Optional[int] = ...,
        node_timeout_ms: Optional[int] = ...,
        connect_timeout_ms: Optional[int] = ...,
        retry_jitter_ms: Optional[int] = ...,
        sync_timeout_ms: Optional[int] = ...,
    ) -> None: ...
    def lock(self, name: str, owner: Optional[int] = ..., *, timeout: Optional[_Seconds] = ...,
             lease: Optional[_Seconds] = ...) -> Lock: ...
    async def close(self, timeout: Optional[_Seconds] = ...) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def uuid(self) -> str: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def quorum(self) -> int: ...
    def metrics(self) -> dict[str, Any]: ...
    def prometheus(self, label: str = ...) -> str: ...
    async def __aenter__(self) -> Client: ...
    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...

class Lock:
    def __init__(self, client: Client, name: str, owner: Optional[int] = ..., *,
                 timeout: Optional[_Seconds] = ..., lease: Optional[_Seconds] = ...) -> None: ...
    async def acquire(self, blocking: bool = ..., timeout: Optional[_Seconds] = ...,
                      lease: Optional[_Seconds] = ...) -> bool: ...
    async def release(self) -> None: ...
    async def extend(self, seconds: Optional[_Seconds]) -> None: ...
    def owned(self) -> bool: ...
    @property
    def validity(self) -> float: ...
    @property
    def hold_count(self) -> int: ...
    @property
    def fencing_token(self) -> int: ...
    @property
    def lost(self) -> asyncio.Event: ...
    @property
    def lost_error(self) -> Optional[Error]: ...
    def on_lost(self, fn: Optional[_F]) -> Optional[_F]: ...
    def cancel_on_lost(self, task: Optional[asyncio.Task[Any]] = ...) -> Callable[[], None]: ...
    @property
    def name(self) -> str: ...
    @property
    def owner(self) -> Optional[int]: ...
    @property
    def owner_id(self) -> Optional[int]: ...
    @property
    def client(self) -> Client: ...
    def __call__(self, timeout: Optional[_Seconds] = ...,
                 lease: Optional[_Seconds] = ...) -> _Scoped: ...
    async def __aenter__(self) -> Lock: ...
    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...

class _Scoped:
    async def __aenter__(self) -> Lock: ...
    async def __aexit__(self, exc_type: Optional[type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None: ...
