"""redlockc.asyncio: whose a hold is, and what "held" means, on real redis-servers.

A hold belongs to its owner in the client (by default the task that calls
acquire(), as the blocking API's default is the calling thread), never to a
Lock object; owned(), hold_count and fencing_token answer from the
engine's validity at the moment they are asked. Every wait is bounded;
nothing asserts on speed.
"""
import asyncio
import gc
import threading
import time

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, until

pytestmark = pytest.mark.asyncio


async def in_task(coro_fn, *args):
    """coro_fn(*args) run to its end in a task of its own (another owner)."""
    return await asyncio.wait_for(asyncio.ensure_future(coro_fn(*args)), 20)


async def try_once(client, name):
    lock = client.lock(name)
    got = await lock.acquire(timeout=0)
    if got:
        await lock.release()
    return got


# ---- a hold belongs to its owner: the task ----------------------------------------------

async def test_collecting_the_lock_object_keeps_the_hold(server, raw):
    # A Lock object used once and dropped: the hold is the task's, renewed
    # by the watchdog, and the next task finds the lock busy.
    async with aclient(server.uri, watchdog_timeout=0.6) as c:
        assert await c.lock("gc").acquire()
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)  # what a release queued by the collection would need
        assert not await in_task(try_once, c, "gc"), "a second task got a lock the first holds"
        renewals = c.metrics()["renewals"]
        assert await until(lambda: c.metrics()["renewals"] >= renewals + 3), "no renewals"
        assert raw.exists("gc"), "the hold was dropped with its Lock object"
        assert not await in_task(try_once, c, "gc")
        await c.lock("gc").release()  # the owner (this task) through a new object
        assert not raw.exists("gc")


async def test_acquire_and_release_through_two_lock_objects_in_one_task(server, raw):
    async with aclient(server.uri, fencing=True) as c:
        assert await c.lock("two").acquire()
        assert c.lock("two").owned() and c.lock("two").hold_count == 1
        token = c.lock("two").fencing_token
        assert await c.lock("two").acquire(timeout=0), "the same owner nests"
        assert c.lock("two").hold_count == 2
        assert c.lock("two").fencing_token == token
        await c.lock("two").release()
        assert raw.exists("two"), "one level left"
        await c.lock("two").release()
        assert not raw.exists("two")
        with pytest.raises(aio.NotOwnerError):
            await c.lock("two").release()


async def test_release_from_another_task_is_refused(server, raw):
    async with aclient(server.uri, fencing=True) as c:
        lock = c.lock("mine")
        assert await lock.acquire()

        async def release_there():
            assert not lock.owned() and lock.hold_count == 0, "held by another task"
            with pytest.raises(aio.NotOwnerError):
                lock.fencing_token
            with pytest.raises(aio.NotOwnerError):
                await lock.release()
            with pytest.raises(aio.NotOwnerError):
                await lock.extend(5)

        await in_task(release_there)
        assert raw.exists("mine") and lock.owned(), "the other task's release touched nothing"
        await lock.release()
        assert not raw.exists("mine")


async def test_an_explicit_owner_releases_from_any_task(server, raw):
    async with aclient(server.uri) as c:
        assert await c.lock("shared", owner=9).acquire()

        async def release_there():
            assert c.lock("shared", owner=9).owned()
            await c.lock("shared", owner=9).release()

        await in_task(release_there)
        assert not raw.exists("shared")


async def test_two_tasks_sharing_one_lock_object_exclude_each_other(server):
    async with aclient(server.uri) as c:
        lock = c.lock("one-object", timeout=10)
        inside, most = 0, 0

        async def worker():
            nonlocal inside, most
            for _ in range(5):
                async with lock:
                    inside += 1
                    most = max(most, inside)
                    await asyncio.sleep(0.002)
                    inside -= 1

        await asyncio.wait_for(asyncio.gather(worker(), worker(), worker()), 30)
        assert most == 1, f"{most} tasks were inside at once through one Lock object"


async def test_wait_for_and_shield_acquire_for_the_calling_task(server, raw):
    # Before Python 3.12 asyncio.wait_for runs its coroutine in a task of its
    # own: the owner is the task that called acquire(), not that one.
    async with aclient(server.uri) as c:
        lock = c.lock("wf")
        assert await asyncio.wait_for(lock.acquire(), 5)
        assert await asyncio.shield(lock.acquire())
        assert lock.hold_count == 2
        await asyncio.wait_for(lock.release(), 5)
        await lock.release()
        assert not raw.exists("wf")


# ---- held means held: the validity at the moment of the question ------------------------

async def test_a_fixed_lease_that_runs_out_is_lost_while_another_takes_it(server, raw):
    async with aclient(server.uri, fencing=True) as c, \
            aclient(server.uri, fencing=True) as other:
        lock = c.lock("lease")
        seen = []
        lock.on_lost(lambda lk, err: seen.append(err))
        assert await lock.acquire(lease=0.4)
        token = lock.fencing_token

        task = asyncio.ensure_future(asyncio.sleep(30))
        lock.cancel_on_lost(task)  # from the owner: the hold is this task's
        assert await asyncio.wait_for(other.lock("lease").acquire(timeout=10), 15), \
            "the other client takes it once the 0.4 s lease ran out"
        assert not lock.owned(), "owned() while another client holds it"
        assert lock.hold_count == 0
        assert lock.validity == 0
        with pytest.raises(aio.LockLostError):
            lock.fencing_token
        await asyncio.wait_for(lock.lost.wait(), 5)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert await until(lambda: seen), "on_lost ran"
        assert isinstance(seen[0], aio.LockLostError), repr(seen[0])
        assert isinstance(lock.lost_error, aio.LockLostError)
        with pytest.raises(aio.LockLostError):
            await lock.release()
        assert other.lock("lease").fencing_token > token
        await other.lock("lease").release()


async def test_the_first_look_after_a_loop_blocked_past_the_lease_says_not_held(server, raw):
    # The loop is blocked (a synchronous call) until a blocking client in a
    # thread has taken the lock: its lease ran out unrenewed meanwhile.
    sync = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri, watchdog_timeout=0.6, fencing=True) as c:
            lock = c.lock("blocked")
            assert await lock.acquire()
            taken = threading.Event()
            thief = threading.Thread(
                target=lambda: sync.lock("blocked", owner=1).acquire(timeout=10) and taken.set())
            thief.start()
            assert taken.wait(15), "the blocking client never got the lock"  # blocks the loop
            thief.join(5)
            assert not lock.owned(), "the first look after the blocked loop says held"
            assert lock.hold_count == 0
            with pytest.raises(aio.LockLostError):
                lock.fencing_token
            await asyncio.wait_for(lock.lost.wait(), 5)
        sync.lock("blocked", owner=1).release()
    finally:
        sync.close()


async def test_validity_over_many_renewals_stays_well_above_zero(server, raw):
    # The engine's figure: renewed every 0.3 s, it never runs down to 0 (a
    # figure that counted down from each renewal's grant to the next would).
    async with aclient(server.uri, watchdog_timeout=0.9) as c:
        lock = c.lock("valid")
        assert await lock.acquire()
        renewals = c.metrics()["renewals"]
        lowest = lock.validity
        for _ in range(2000):
            lowest = min(lowest, lock.validity)
            if c.metrics()["renewals"] >= renewals + 8:
                break
            await asyncio.sleep(0.005)
        assert c.metrics()["renewals"] >= renewals + 8, "fewer renewals than sampled for"
        assert lowest > 0.2, f"validity went down to {lowest} s on a healthy hold"
        assert lock.owned()
        await lock.release()


async def test_a_grant_waiting_on_the_socket_survives_a_loop_blocked_past_io_timeout(
        server, raw):
    async with aclient(server.uri, io_timeout=0.2) as c:
        async with c.lock("warm"):  # connected first
            pass
        lock = c.lock("late")
        task = asyncio.ensure_future(lock.acquire())
        await asyncio.sleep(0)  # the acquire is written
        for _ in range(1000):  # the loop is blocked from here: the reply waits on the socket
            if raw.exists("late"):
                break
            time.sleep(0.005)
        assert raw.exists("late"), "the server never got the acquire"
        time.sleep(0.6)  # still blocked, three times io_timeout
        assert await asyncio.wait_for(task, 5) is True, "the grant became a timeout"
        assert lock.owned()
        await lock.release()
