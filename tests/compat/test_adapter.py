"""redlockc.compat beyond redis-py's own tests: what a fleet that mixes redis-py's
Lock and this adapter sees, and how redis-py's client settings reach the library.

Run by run.sh in its venv (redis-py of the pinned version); real redis-server
processes from tests/python/redis_servers.py, one per test, stopped by pid.
"""
import asyncio
import os
import sys
import threading

import pytest
import redis
import redis.asyncio
from redis.exceptions import LockError, LockNotOwnedError
from redis.lock import Lock as RedisPyLock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]
from redis_servers import RedisServer, free_port, wait_until  # noqa: E402

from redlockc import compat  # noqa: E402
from redlockc.compat import AsyncLock, Lock  # noqa: E402


@pytest.fixture
def server():
    s = RedisServer().start()
    yield s
    s.stop()


@pytest.fixture
def r(server):
    client = redis.Redis(host="127.0.0.1", port=server.port)
    yield client
    client.close()


def test_a_redis_py_lock_and_ours_exclude_each_other_both_ways(r):
    theirs = r.lock("orders", timeout=10, lock_class=RedisPyLock)
    ours = r.lock("orders", timeout=10, lock_class=Lock)
    assert theirs.acquire(blocking=False)
    assert not ours.acquire(blocking=False)
    theirs.release()
    assert ours.acquire(blocking=False)
    assert not theirs.acquire(blocking=False)
    assert r.get("orders") == ours.local.token  # one string key: the classic layout
    ours.release()
    assert theirs.acquire(blocking=False)
    theirs.release()


def test_our_waiter_gets_the_lock_when_redis_py_releases_it(r):
    theirs = r.lock("orders", lock_class=RedisPyLock)
    assert theirs.acquire(blocking=False)
    got = []
    ours = r.lock("orders", blocking_timeout=10, lock_class=Lock)
    waiter = threading.Thread(target=lambda: got.append(ours.acquire()))
    waiter.start()
    assert wait_until(lambda: not waiter.is_alive(), timeout=0.3) is False  # it waits
    theirs.release()
    waiter.join(10)
    assert got == [True]
    assert r.get("orders") is not None and r.get("orders") != theirs.local.token


def test_release_by_an_object_that_does_not_hold_it_is_lock_error_and_frees_nothing(r):
    holder = r.lock("orders", lock_class=Lock)
    other = r.lock("orders", lock_class=Lock)
    assert holder.acquire(blocking=False)
    with pytest.raises(LockError) as e:
        other.release()
    assert e.value.lock_name == "orders"
    assert holder.owned() and r.get("orders") is not None
    holder.release()


def test_a_release_after_redis_py_took_the_expired_key_is_lock_not_owned(r):
    ours = r.lock("orders", timeout=0.2, lock_class=Lock)
    assert ours.acquire(blocking=False)
    theirs = r.lock("orders", timeout=10, lock_class=RedisPyLock)
    assert theirs.acquire(blocking_timeout=5)  # once our lease ran out
    with pytest.raises(LockNotOwnedError):
        ours.release()
    assert r.get("orders") == theirs.local.token  # theirs is untouched
    theirs.release()


def test_extend_and_reacquire_by_a_former_holder_never_touch_the_new_holders_key(r):
    ours = r.lock("orders", timeout=10, lock_class=Lock)
    assert ours.acquire(blocking=False)
    r.delete("orders")
    theirs = r.lock("orders", timeout=10, lock_class=RedisPyLock)
    assert theirs.acquire(blocking=False)
    r.pexpire("orders", 5000)
    for call in (lambda: ours.extend(100), ours.reacquire):
        with pytest.raises(LockNotOwnedError):
            call()
    assert r.pttl("orders") <= 5000 and r.get("orders") == theirs.local.token


def test_thread_local_false_lets_another_thread_release(r):
    lock = r.lock("orders", thread_local=False, lock_class=Lock)
    assert lock.acquire(blocking=False)
    errors = []
    t = threading.Thread(target=lambda: _call(lock.release, errors))
    t.start()
    t.join(10)
    assert errors == [] and r.get("orders") is None


def test_thread_local_true_keeps_the_hold_to_its_thread(r):
    lock = r.lock("orders", lock_class=Lock)
    assert lock.acquire(blocking=False)
    errors = []
    t = threading.Thread(target=lambda: _call(lock.release, errors))
    t.start()
    t.join(10)
    assert [type(e) for e in errors] == [LockError]
    assert lock.owned()
    lock.release()


def test_threads_sharing_one_lock_object_exclude_each_other(r):
    lock = r.lock("orders", thread_local=False, lock_class=Lock)
    assert lock.acquire(blocking=False)
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(blocking_timeout=0.2)))
    t.start()
    t.join(10)
    assert got == [False]
    lock.release()


def test_timeout_none_is_a_watchdog_lease_not_a_key_without_ttl(r):
    lock = r.lock("orders", lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert 0 < r.pttl("orders") <= 30_000  # watchdog_timeout: gone 30 s after a crash
    with pytest.raises(LockError):
        lock.extend(5)  # as redis-py: no timeout, nothing to extend
    lock.release()


def test_a_callers_token_is_refused_before_anything_is_taken(r):
    lock = r.lock("orders", lock_class=Lock)
    with pytest.raises(NotImplementedError):
        lock.acquire(token="mine")
    assert r.get("orders") is None and lock.local.token is None


def test_library_errors_are_redis_py_exception_classes():
    dead = redis.Redis(port=free_port())  # nothing listens there
    with pytest.raises(redis.exceptions.ConnectionError):
        dead.lock("orders", lock_class=Lock).acquire(blocking=False)


def test_unix_socket_password_and_db_reach_the_library(start_server):
    s = start_server("--requirepass", "p@ss:w,rd")
    tcp = redis.Redis(port=s.port, password="p@ss:w,rd", db=3)
    unix = redis.Redis(unix_socket_path=s.socket, password="p@ss:w,rd", db=3)
    lock = unix.lock("orders", timeout=10, lock_class=Lock)
    assert lock.acquire(blocking=False)
    assert tcp.get("orders") == lock.local.token  # db 3, through the socket
    assert redis.Redis(port=s.port, password="p@ss:w,rd").get("orders") is None  # not db 0
    assert not tcp.lock("orders", lock_class=RedisPyLock).acquire(blocking=False)
    lock.release()
    assert tcp.get("orders") is None
    tcp.close(), unix.close()


def test_one_library_client_per_connection_pool(r, server):
    assert compat.client_for(r) is compat.client_for(r.client())  # same pool
    other = redis.Redis(host="127.0.0.1", port=server.port)
    assert compat.client_for(other) is not compat.client_for(r)
    assert compat.client_for(r).nodes == (f"redis://127.0.0.1:{server.port}/0",)
    other.close()


@pytest.fixture
def start_server():
    started = []

    def start(*args):
        s = RedisServer(*args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def _call(fn, errors):
    try:
        fn()
    except Exception as e:  # handed to the test's thread
        errors.append(e)


# ---- redis.asyncio --------------------------------------------------------------

def test_asyncio_redis_py_lock_and_ours_exclude_each_other(server):
    async def main():
        r = redis.asyncio.Redis(port=server.port)
        theirs = r.lock("orders", timeout=10, lock_class=redis.asyncio.lock.Lock)
        ours = r.lock("orders", timeout=10, lock_class=AsyncLock)
        assert await theirs.acquire(blocking=False)
        assert not await ours.acquire(blocking=False)
        await theirs.release()
        assert await ours.acquire(blocking=False)
        assert await r.get("orders") == ours.local.token
        assert not await theirs.acquire(blocking=False)
        await ours.release()
        assert await r.get("orders") is None
        await r.aclose()
    asyncio.run(main())


def test_asyncio_a_cancelled_wait_leaves_nothing_held(server):
    async def main():
        r = redis.asyncio.Redis(port=server.port)
        holder = r.lock("orders", lock_class=AsyncLock)
        assert await holder.acquire(blocking=False)
        waiter = r.lock("orders", lock_class=AsyncLock)
        client = compat.async_client_for(r)
        waits = client.metrics()["waits"]
        task = asyncio.create_task(waiter.acquire())
        for _ in range(500):  # until the library counts its wait (at most ~5 s)
            if client.metrics()["waits"] > waits:
                break
            await asyncio.sleep(0.01)
        assert client.metrics()["waits"] > waits and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.release()
        for _ in range(30):  # the cancelled waiter never takes it (0.3 s: 3 polls)
            assert await r.get("orders") is None
            await asyncio.sleep(0.01)
        assert waiter.local.token is None
        await r.aclose()
    asyncio.run(main())


def test_asyncio_release_after_the_key_was_replaced_is_lock_not_owned(server):
    async def main():
        r = redis.asyncio.Redis(port=server.port)
        ours = r.lock("orders", timeout=10, lock_class=AsyncLock)
        assert await ours.acquire(blocking=False)
        await r.set("orders", "someone else")
        assert not await ours.owned()
        with pytest.raises(LockNotOwnedError):
            await ours.release()
        assert await r.get("orders") == b"someone else"
        await r.aclose()
    asyncio.run(main())

