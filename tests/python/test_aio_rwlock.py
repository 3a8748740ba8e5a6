"""redlockc.asyncio's read-write lock: the write side on the engine, against real redis-servers.

The write side is an engine lock of kind RLC_KIND_WRITE, in Redisson's
RReadWriteLock layout: hash field "<uuid>:<owner>:write", mode "write", the
waiting writers in the zset redlockc_rwlock_writers:{name}. Every wait is
bounded (asyncio.wait_for, or `until` polling a condition); nothing asserts
on speed.
"""
import asyncio
import threading

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, elsewhere, until

pytestmark = pytest.mark.asyncio


def writers(name):
    return f"redlockc_rwlock_writers:{{{name}}}"


def rw_subscribers(raw, name):
    """Subscribers of the read-write lock's channel (the waiting writers' wake-up)."""
    return raw.pubsub_numsub(f"redisson_rwlock:{{{name}}}")[0][1]


def hash_of(raw, name):
    return {k.decode(): v.decode() for k, v in raw.hgetall(name).items()}


async def test_write_side_writes_redissons_layout(server, raw):
    async with aclient(server.uri) as c:
        w = c.rwlock("layout", owner=7).write()
        async with w:
            assert hash_of(raw, "layout") == {"mode": "write", f"{c.uuid}:7:write": "1"}, \
                "Redisson's RReadWriteLock: mode write, the writer's field <uuid>:<owner>:write"
            assert raw.pttl("layout") > 20000, "watchdog lease (30 s) on the hash"
            assert w.hold_count == 1 and w.owned() and 0 < w.validity <= 30
        assert not raw.exists("layout"), "released at the end of the block"
        assert w.hold_count == 0 and w.validity == 0.0 and not w.owned()


async def test_two_asyncio_clients_exclude_each_other_and_a_released_writer_wakes_the_other(
        server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        wa, wb = a.rwlock("excl").write(), b.rwlock("excl").write()
        assert await wa.acquire(timeout=0)
        assert not await wb.acquire(timeout=0), "another client's writer is refused"
        waiting = asyncio.ensure_future(wb.acquire(timeout=10))
        assert await until(lambda: raw.zcard(writers("excl")) == 1), \
            "the waiting writer registered among the writers"
        assert not waiting.done()
        await wa.release()
        assert await asyncio.wait_for(waiting, 10), "the release woke the waiting writer"
        assert hash_of(raw, "excl") == {"mode": "write", f"{b.uuid}:{wb.owner_id}:write": "1"}
        assert raw.zcard(writers("excl")) == 0, "a granted writer leaves the queue"
        await wb.release()
        assert not raw.exists("excl")


async def test_write_side_excludes_the_blocking_clients_readers_and_writers(server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            w = c.rwlock("mixed").write()
            assert await w.acquire(timeout=0, lease=10)
            reader = blocking.rwlock("mixed", owner=1).read()
            writer = blocking.rwlock("mixed", owner=2).write()
            assert not await asyncio.to_thread(reader.acquire, timeout=0), "no reader beside"
            assert not await asyncio.to_thread(writer.acquire, timeout=0), "no second writer"
            await w.release()
            assert await asyncio.to_thread(reader.acquire, timeout=0)
            assert not await w.acquire(timeout=0), "the asyncio writer waits for a reader"
            await asyncio.to_thread(reader.release)
    finally:
        blocking.close()


async def test_one_task_is_reentrant_and_another_task_is_excluded(server, raw):
    async with aclient(server.uri) as c:
        w = c.rwlock("re").write()
        assert await w.acquire() and await c.rwlock("re").write().acquire(), \
            "one task nests, through either object"
        assert w.hold_count == 2
        assert hash_of(raw, "re")[f"{c.uuid}:{w.owner_id}:write"] == "2"
        assert not await elsewhere(w.acquire, timeout=0), "another task is another owner: busy"
        await w.release()
        assert raw.exists("re") and w.hold_count == 1, "one level left"
        await w.release()
        assert not raw.exists("re")
        with pytest.raises(aio.NotOwnerError):
            await w.release()


async def test_a_write_hold_and_a_lock_of_one_name_and_owner_are_apart(server, raw):
    async with aclient(server.uri) as c:
        w = c.rwlock("apart", owner=3).write()
        lock = c.lock("apart", owner=3)
        assert await w.acquire(timeout=0)
        assert lock.hold_count == 0 and not lock.owned(), "the Lock of the name holds nothing"
        with pytest.raises(aio.NotOwnerError):
            await lock.release()  # nothing of the lock kind to release
        assert w.hold_count == 1, "the write hold is untouched"
        await w.release()


async def test_a_write_holds_loss_reaches_its_write_side_and_no_lock_of_the_name(server, raw):
    async with aclient(server.uri) as c:
        w = c.rwlock("lost", owner=5).write()
        lock = c.lock("lost", owner=5)
        lock_heard, write_heard = [], []
        lock.on_lost(lambda lk, err: lock_heard.append(err))
        w.on_lost(lambda lk, err: write_heard.append(err))
        assert await w.acquire(timeout=0)
        raw.delete("lost")  # taken from under the writer: its next renewal finds it gone
        assert await until(lambda: write_heard, timeout=30), "the write side heard its loss"
        assert isinstance(write_heard[0], aio.LockLostError)
        assert w.lost.is_set() and w.hold_count == 0 and not w.owned()
        await asyncio.sleep(0)  # any callback queued for the Lock has run by now
        assert lock_heard == [], "the Lock of the same name and owner heard nothing"
        with pytest.raises(aio.LockLostError):
            await w.release()


async def test_cancelling_a_waiting_writer_leaves_no_field_and_no_place_in_the_queue(server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.rwlock("cx", owner=1).write()
        assert await holder.acquire(timeout=0, lease=30)
        w = c.rwlock("cx").write()
        task = asyncio.ensure_future(w.acquire())
        assert await until(lambda: raw.zcard(writers("cx")) == 1), "it waits, registered"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert await until(lambda: raw.zcard(writers("cx")) == 0), \
            "the cancelled writer withdrew from the waiting writers"
        assert await until(lambda: rw_subscribers(raw, "cx") == 0), \
            "no one waits on the channel any more"
        assert hash_of(raw, "cx") == {"mode": "write",
                                      f"{holder_client.uuid}:1:write": "1"}, \
            "only the holder's field: the cancelled writer kept nothing"
        await holder.release()
        await asyncio.sleep(0.05)  # a late grant would have come by now; nothing took the lock
        assert not raw.exists("cx")
        assert not w.owned() and w.hold_count == 0


async def test_a_thousand_waiting_writers_start_no_thread(server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.rwlock("many", owner=1).write()
        assert await holder.acquire(timeout=0, lease=60)
        before = threading.active_count()
        tasks = [asyncio.ensure_future(c.rwlock("many", owner=100 + i).write().acquire(
            timeout=60, lease=30)) for i in range(1000)]
        assert await until(lambda: raw.zcard(writers("many")) == 1000, timeout=30), \
            "every writer waits, registered"
        assert threading.active_count() == before, "waiting writers start no thread"
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert await until(lambda: raw.zcard(writers("many")) == 0, timeout=30), \
            "every cancelled writer withdrew"
        assert threading.active_count() == before
        await holder.release()


async def test_read_side_is_not_on_asyncio_yet(server):
    async with aclient(server.uri) as c:
        rw = c.rwlock("r")
        with pytest.raises(NotImplementedError, match="RLC_KIND_READ"):
            rw.read()
        assert rw.write() is rw.write()
        assert repr(rw.write()) == "<write side of <redlockc.asyncio.ReadWriteLock 'r' owner=task>>"


async def test_write_side_refuses_bad_arguments(server):
    async with aclient(server.uri) as c:
        with pytest.raises(aio.InvalidArgument):
            c.rwlock("")
        with pytest.raises(aio.InvalidArgument):
            c.rwlock("x", owner=2**61)
        with pytest.raises(TypeError):
            c.rwlock("x").write().acquire(lease="5")
