"""redlockc.asyncio's multi-name lock on the engine, against real redis-servers.

A multi-lock is one engine acquire over every name (rlc_engine_acquire_multi):
on each node one script takes them all or writes nothing; each name is then
a Lock hold (Redisson's layout: the name's hash, field "<uuid>:<owner>") of
the owner, released name by name. Every wait is bounded (asyncio.wait_for,
or `until` polling a condition); nothing asserts on speed.
"""
import asyncio
import os
import threading

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, subscribers, until

pytestmark = pytest.mark.asyncio

WAKE_S = 5  # far below the watchdog's 30 s: a bound only a wake-up by the release meets


def fields(raw, name):
    """The lock hash of name: {"<uuid>:<owner>": level}."""
    return {k.decode(): int(v) for k, v in raw.hgetall(name).items()}


def os_threads():
    """The process's threads as the kernel counts them (also those Python did not start)."""
    return len(os.listdir("/proc/self/task"))


def cancel_when(task, condition):
    """Cancels task in the first loop iteration where condition() holds (checked
    once an iteration, at most a million times), before the task resumes."""
    loop = asyncio.get_running_loop()

    def check(left):
        if task.done():
            return
        if condition():
            task.cancel()
        elif left:
            loop.call_soon(check, left - 1)
    loop.call_soon(check, 1_000_000)


async def test_a_waiting_multi_lock_lets_other_coroutines_run(server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            other = blocking.lock("w2", owner=9)
            assert other.acquire(timeout=0, lease=30)
            ml = c.multi_lock(["w2", "w1"], owner=3)
            assert isinstance(ml, aio.MultiLock) and ml.names == ("w1", "w2") and len(ml) == 2
            ticks = [0]

            async def ticker():
                for _ in range(100_000):
                    ticks[0] += 1
                    await asyncio.sleep(0.005)
            tick = asyncio.ensure_future(ticker())
            waiting = asyncio.ensure_future(ml.acquire(timeout=60))
            assert await until(lambda: subscribers(raw, "w2") >= 1)
            seen = ticks[0]
            assert await until(lambda: ticks[0] >= seen + 20, timeout=10), \
                "the ticker kept ticking while the multi-lock waited"
            assert not waiting.done(), "still waiting: w2 is held"
            assert not raw.exists("w1"), "all or none: nothing taken while it waits"
            other.release()  # a blocking call of one round trip, on the loop's thread
            assert await asyncio.wait_for(waiting, WAKE_S), "the release woke the waiter"
            tick.cancel()
            for name in ("w1", "w2"):
                assert fields(raw, name) == {f"{c.uuid}:3": 1}, "each name a Lock hold of owner 3"
            assert ml.owned() and c.lock("w1", owner=3).hold_count == 1
            await ml.release()
            assert not raw.exists("w1") and not raw.exists("w2") and not ml.owned()
            with pytest.raises(aio.NotOwnerError):
                await ml.release()
    finally:
        blocking.close()


async def test_two_overlapping_sets_are_all_or_none_under_contention(server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        xy, yz = a.multi_lock(["x", "y"]), b.multi_lock(["y", "z"])
        assert await xy.acquire(timeout=0)
        waiting = asyncio.ensure_future(yz.acquire(timeout=60))
        assert await until(lambda: subscribers(raw, "y") >= 1)
        assert not raw.exists("z"), "the waiting set took none of its names"
        zw = b.multi_lock(["z", "w"], owner=77)
        assert await zw.acquire(timeout=0), "z is free: no partial hold of the waiter"
        await zw.release()
        await xy.release()
        assert await asyncio.wait_for(waiting, WAKE_S)
        assert not raw.exists("x") and raw.exists("y") and raw.exists("z")
        await yz.release()

        inside = {"x": 0, "y": 0, "z": 0}
        peak = [0]

        async def worker(ml):
            for _ in range(5):
                async with ml(timeout=30):
                    for n in ml.names:
                        inside[n] += 1
                        peak[0] = max(peak[0], inside[n])
                    await asyncio.sleep(0.005)
                    for n in ml.names:
                        inside[n] -= 1
        jobs = [worker(c.multi_lock(names)) for c in (a, b) for names in (["x", "y"], ["y", "z"])
                for _ in range(2)]
        await asyncio.wait_for(asyncio.gather(*jobs), 60)
        assert peak[0] == 1, "no name was ever held by two multi-locks at once"
        assert not any(raw.exists(n) for n in ("x", "y", "z"))


async def test_a_cancelled_waiting_task_keeps_no_name(server, raw):
    async with aclient(server.uri) as c:
        holder = c.lock("c2", owner=50)
        ml = c.multi_lock(["c1", "c2", "c3"], owner=60)
        assert await holder.acquire(timeout=0, lease=30)
        waiting = asyncio.ensure_future(ml.acquire(timeout=60))
        assert await until(lambda: subscribers(raw, "c2") >= 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await holder.release()
        await asyncio.sleep(0.05)  # a grant after the cancel would have come by now
        assert not any(raw.exists(n) for n in ("c1", "c2", "c3")), "the cancelled wait kept nothing"
        assert not ml.owned() and c.lock("c1", owner=60).hold_count == 0
        # The grant crossing the cancel: the task is cancelled once the grant
        # reached the engine (hold_count, no I/O) and before the task resumed.
        for i in range(5):
            assert await holder.acquire(timeout=0, lease=30)
            waiting = asyncio.ensure_future(ml.acquire(timeout=60))
            assert await until(lambda: subscribers(raw, "c2") >= 1)
            cancel_when(waiting, lambda: c.lock("c1", owner=60).hold_count > 0)
            await holder.release()
            await asyncio.wait_for(asyncio.gather(waiting, return_exceptions=True), WAKE_S)
            assert waiting.cancelled(), "cancelled, though granted: the caller never sees True"
            assert await until(lambda: not any(raw.exists(n) or c.lock(n, owner=60).hold_count
                                               for n in ("c1", "c2", "c3"))), \
                f"round {i}: a grant nobody awaits was given back, every name"
        other = c.multi_lock(["c1", "c2", "c3"], owner=61)
        assert await other.acquire(timeout=0)
        await other.release()


async def test_the_blocking_multi_lock_and_asyncio_exclude_each_other(server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            b_ml = blocking.multi_lock(["i2", "i1"], owner=1)
            a_ml = c.multi_lock(["i1", "i2"], owner=2)
            assert await asyncio.to_thread(b_ml.acquire, timeout=0)
            assert not await a_ml.acquire(timeout=0), "the blocking holder excludes asyncio"
            assert not await c.lock("i1", owner=5).acquire(timeout=0)
            waiting = asyncio.ensure_future(a_ml.acquire(timeout=60))
            assert await until(lambda: subscribers(raw, "i1") + subscribers(raw, "i2") >= 1)
            await asyncio.to_thread(b_ml.release)
            assert await asyncio.wait_for(waiting, WAKE_S), "the blocking release woke asyncio"
            assert fields(raw, "i1") == fields(raw, "i2") == {f"{c.uuid}:2": 1}
            assert not await asyncio.to_thread(b_ml.acquire, timeout=0)
            b_waiting = asyncio.ensure_future(asyncio.to_thread(b_ml.acquire, timeout=60))
            await asyncio.sleep(0.1)
            await a_ml.release()
            assert await asyncio.wait_for(b_waiting, WAKE_S), "the asyncio release woke blocking"
            assert fields(raw, "i1") == {f"{blocking.uuid}:1": 1}
            await asyncio.to_thread(b_ml.release)
            assert not raw.exists("i1") and not raw.exists("i2")
    finally:
        blocking.close()


async def test_losing_one_name_is_reported_as_a_locks_loss(server, raw):
    async with aclient(server.uri, watchdog_timeout=0.6) as c:  # a renewal each 0.2 s
        ml = c.multi_lock(["l1", "l2"], owner=8)
        lock = c.lock("l2", owner=8)
        heard = []
        lock.on_lost(lambda lk, err: heard.append(err))
        assert await ml.acquire(timeout=0)
        assert ml.lost_error is None and not lock.lost.is_set()
        raw.delete("l2")  # taken from under the holder: the next renewal finds it gone
        assert await until(lambda: heard, timeout=10), "the Lock of the name heard the loss"
        assert isinstance(heard[0], aio.LockLostError) and "lock 'l2'" in str(heard[0])
        assert lock.lost.is_set() and isinstance(ml.lost_error, aio.LockLostError)
        assert c.lock("l1", owner=8).lost_error is None, "l1 is still held"
        with pytest.raises(aio.LockLostError):
            await ml.release()
        assert not raw.exists("l1"), "every name is released, also after one failed"


async def test_200_waiting_multi_locks_start_no_thread(server, raw):
    async with aclient(server.uri) as c:
        holder = c.lock("t0", owner=1)
        assert await holder.acquire(timeout=0, lease=60)
        before = threading.active_count(), os_threads()
        tasks = [asyncio.ensure_future(c.multi_lock(["t0", f"t{i}"]).acquire(timeout=60))
                 for i in range(1, 201)]
        assert await until(lambda: subscribers(raw, "t0") >= 1)
        await asyncio.sleep(0.2)  # every first try came back busy
        assert (threading.active_count(), os_threads()) == before, \
            "200 waiting multi-lock acquires start no thread"
        assert not any(t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert (threading.active_count(), os_threads()) == before
        await holder.release()
        await asyncio.sleep(0.05)
        assert raw.keys("t*") == [], "no cancelled waiter kept a name"


async def test_bad_arguments_are_refused(server):
    async with aclient(server.uri) as c:
        with pytest.raises(TypeError):
            c.multi_lock("ab")
        with pytest.raises(aio.InvalidArgument):
            c.multi_lock([])
        with pytest.raises(aio.InvalidArgument):
            c.multi_lock([f"n{i}" for i in range(1025)])
        with pytest.raises(aio.InvalidArgument):
            c.multi_lock(["a", ""])
        with pytest.raises(TypeError):
            with c.multi_lock(["a"]):
                pass
        assert repr(c.multi_lock(["b", "a"], owner=4)) == \
            "<redlockc.asyncio.MultiLock ['a', 'b'] owner=4>"


async def test_over_three_nodes_a_multi_lock_takes_every_name_on_a_quorum(servers3):
    raws = [s.raw() for s in servers3]
    try:
        async with aclient([s.uri for s in servers3]) as c:
            ml = c.multi_lock(["n1", "n2"], owner=5)
            assert await ml.acquire(timeout=0)
            for r in raws:
                assert fields(r, "n1") == fields(r, "n2") == {f"{c.uuid}:5": 1}
            assert not await c.multi_lock(["n2", "n3"], owner=6).acquire(timeout=0)
            assert not any(r.exists("n3") for r in raws), "the refused set took nothing"
            await ml.release()
            assert not any(r.exists(n) for r in raws for n in ("n1", "n2"))
    finally:
        for r in raws:
            r.close()
