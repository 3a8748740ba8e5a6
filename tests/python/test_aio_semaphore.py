"""redlockc.asyncio's semaphores on the engine, against real redis-servers.

Both are engine kinds (RLC_KIND_SEMAPHORE, RLC_KIND_PSEMAPHORE) in Redisson's
layout: the count of free permits at the key `name`, waiters woken by the
channel redisson_sc:{name} (every message wakes every waiter), and for the
expirable kind the zset {name}:timeout of permits taken, scored with their
lease's end. Every wait is bounded (asyncio.wait_for, or `until` polling a
condition); nothing asserts on speed: a bound of a few seconds for many
waiters only tells the release's wake-up from the engine's safety poll,
which wakes one waiter a second.
"""
import asyncio
import os
import threading
import time

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, until

pytestmark = pytest.mark.asyncio

# Many waiters, woken by one release: far within this bound. The safety
# poll alone (one waiter a second) would take WAKE_WAITERS seconds.
WAKE_WAITERS = 30
WAKE_S = 5
# The cancel of a waiting task placed at each of this many loop iterations
# after a release, the loop held STEP_S before each.
CANCEL_STEPS = 6
STEP_S = 0.02


def channel(name):
    return f"redisson_sc:{{{name}}}"


def listeners(raw, name):
    """Subscribers of the semaphore's channel (waiters' connections)."""
    return raw.pubsub_numsub(channel(name))[0][1]


def os_threads():
    """The process's threads as the kernel counts them (also those Python did not start)."""
    return len(os.listdir("/proc/self/task"))


async def test_permits_never_exceed_the_count_with_several_waiting_tasks(server, raw):
    async with aclient(server.uri) as c:
        sem = c.semaphore("sem", 3)
        assert isinstance(sem, aio.Semaphore)
        assert await sem.available() == 3 and raw.get("sem") == b"3", \
            "the count set before the first call, at Redisson's key"
        assert not await c.semaphore("sem", 5).try_set_permits(5), "set only if it has none"
        inside, peak = [0], [0]

        async def worker():
            s = c.semaphore("sem")  # another object of the name: the same permits
            for _ in range(5):
                async with s:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                    assert int(raw.get("sem")) >= 0
                    await asyncio.sleep(0.01)
                    inside[0] -= 1

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(8))), 60)
        assert peak[0] == 3, "three at once, never more"
        assert await sem.available() == 3 and raw.get("sem") == b"3", "every permit back"


async def test_a_release_wakes_every_waiter_far_within_the_safety_poll(server, raw):
    async with aclient(server.uri) as c:
        sem = c.semaphore("wake", 1)
        assert await sem.acquire(timeout=0)
        tasks = [asyncio.ensure_future(sem.acquire(timeout=120)) for _ in range(WAKE_WAITERS)]
        assert await until(lambda: listeners(raw, "wake") == 1), "they wait on the channel"
        await asyncio.sleep(0.05)  # every waiter's first try came back busy
        assert not any(t.done() for t in tasks)
        await sem.release(WAKE_WAITERS)
        done, _ = await asyncio.wait(tasks, timeout=WAKE_S)
        assert len(done) == WAKE_WAITERS and all(t.result() for t in tasks), \
            f"one release woke all {WAKE_WAITERS} waiters within {WAKE_S} s"
        assert await sem.available() == 0, "each took one of the 30 given back"
        await sem.release()
        several = asyncio.ensure_future(sem.acquire(3, timeout=120))
        await asyncio.sleep(0.05)
        assert not several.done(), "three permits wanted, one free"
        await sem.release(2)
        assert await asyncio.wait_for(several, WAKE_S), "three at once, when three were free"
        assert raw.get("wake") == b"0"
        assert await sem.acquire(timeout=0.1) is False, "a timed wait that stayed busy"


async def test_the_blocking_semaphore_and_redisson_share_the_permits(server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            b_sem = blocking.semaphore("mix", 2)
            a_sem = c.semaphore("mix")
            assert await a_sem.available() == 2 and raw.get("mix") == b"2"
            assert await a_sem.acquire(2, timeout=0)
            assert raw.get("mix") == b"0"
            assert not await asyncio.to_thread(b_sem.acquire, timeout=0), \
                "asyncio's permits are out for the blocking client too"
            b_waiting = asyncio.ensure_future(asyncio.to_thread(b_sem.acquire, timeout=60))
            await asyncio.sleep(0.05)
            assert not b_waiting.done()
            await a_sem.release()
            assert await asyncio.wait_for(b_waiting, 30), "asyncio's release reached the blocking waiter"
            assert raw.get("mix") == b"0"
            a_waiting = asyncio.ensure_future(a_sem.acquire(timeout=60))
            assert await until(lambda: listeners(raw, "mix") >= 1), \
                "the asyncio waiter listens on redisson_sc:{mix}"
            await asyncio.to_thread(b_sem.release)
            assert await asyncio.wait_for(a_waiting, 30), "the blocking release reached asyncio"
            assert raw.get("mix") == b"0" and b_sem.available == 0

            # Redisson's release: INCRBY on the key, one message on the channel
            waiters = [asyncio.ensure_future(a_sem.acquire(timeout=120))
                       for _ in range(WAKE_WAITERS)]
            await asyncio.sleep(0.05)  # their first tries came back busy
            assert not any(t.done() for t in waiters)
            raw.incrby("mix", WAKE_WAITERS)
            raw.publish(channel("mix"), WAKE_WAITERS)
            done, _ = await asyncio.wait(waiters, timeout=WAKE_S)
            assert len(done) == WAKE_WAITERS, \
                f"Redisson's one message woke all {WAKE_WAITERS} waiters within {WAKE_S} s"
            assert raw.get("mix") == b"0"
            await a_sem.release(WAKE_WAITERS + 2)
            assert b_sem.available == WAKE_WAITERS + 2
    finally:
        blocking.close()


async def test_a_cancelled_waiting_task_keeps_nothing(server, raw):
    async with aclient(server.uri) as c:
        sem = c.semaphore("scx", 1)
        assert await sem.acquire(timeout=0)
        task = asyncio.ensure_future(sem.acquire())
        assert await until(lambda: listeners(raw, "scx") == 1), "it waits on the channel"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        await sem.release()
        await asyncio.sleep(0.05)  # a late grant would have come by now
        assert raw.get("scx") == b"1" and await sem.available() == 1, "nothing kept"

        # A release and the cancel close together. Each loop iteration below
        # begins with every byte sent to this process already in its sockets
        # (the loop is held for STEP_S first), so the k-th iteration sees the
        # same step of the hand-off each time: the wake message, the try's
        # answer (the grant reaching the future), the task resuming. The
        # cancel lands at each step in turn, including between the grant and
        # the task's resumption, where nothing but the driver gives it back.
        assert await sem.acquire(timeout=0)
        cancelled_rounds = 0
        for i in range(3 * CANCEL_STEPS):
            waiter = asyncio.ensure_future(sem.acquire(timeout=60))
            assert await until(lambda: listeners(raw, "scx") == 1)
            await asyncio.sleep(0.05)  # its first try came back busy: it waits
            raw.incrby("scx", 1)  # Redisson's release, from outside this client
            raw.publish(channel("scx"), 1)
            for _ in range(i % CANCEL_STEPS):
                time.sleep(STEP_S)  # what is on its way arrives before the next iteration
                await asyncio.sleep(0)
            if not waiter.cancel():  # it had ended with the permit: the next round's held one
                assert waiter.result() and raw.get("scx") == b"0"
                continue
            cancelled_rounds += 1
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(waiter, 10)
            assert await until(lambda: raw.get("scx") == b"1"), \
                f"round {i}: the cancelled waiter kept nothing"
            assert await sem.acquire(timeout=5), f"round {i}: the permit is there to take"
        assert cancelled_rounds >= CANCEL_STEPS, "most rounds cancelled a waiting task"
        await sem.release()
        assert raw.get("scx") == b"1"


async def test_an_expirable_permit_has_an_id_and_goes_back_when_its_lease_ends(server, raw):
    async with aclient(server.uri) as c:
        sem = c.permit_semaphore("psem", 2)
        assert isinstance(sem, aio.PermitExpirableSemaphore)
        pid = await sem.acquire(lease=30)
        assert isinstance(pid, str) and len(pid) == 32 and int(pid, 16) >= 0
        assert raw.get("psem") == b"1" and raw.zcard("{psem}:timeout") == 1, \
            "Redisson's layout: the count and the zset of permits taken"
        assert raw.zrange("{psem}:timeout", 0, -1) == [bytes.fromhex(pid)]
        await sem.release(pid)
        assert await sem.available() == 2 and raw.zcard("{psem}:timeout") == 0
        with pytest.raises(aio.LockLostError):
            await sem.release(pid)
        assert await sem.available() == 2, "the second release gave nothing back"

        both = await sem.acquire(2, lease=0.5)
        assert await sem.acquire(timeout=0, lease=5) is None, "both permits are out"
        waiting = asyncio.ensure_future(sem.acquire(timeout=30, lease=5))
        later = await asyncio.wait_for(waiting, 20)
        assert later is not None and later != both, "the lease's end gave the permits back"
        assert await sem.available() == 1
        with pytest.raises(aio.LockLostError):
            await sem.release(both)
        assert await sem.available() == 1, "the late release added nothing"
        async with sem.permit(lease=5) as p2:
            assert len(p2) == 32 and await sem.available() == 0
            with pytest.raises(aio.TimeoutError):
                async with sem.permit(timeout=0.1, lease=5):
                    pass
        assert await sem.available() == 1
        await sem.release(later)
        assert await sem.available() == 2


async def test_a_thousand_waiting_acquires_start_no_thread(server, raw):
    async with aclient(server.uri) as c:
        sem, psem = c.semaphore("many", 1), c.permit_semaphore("pmany", 1)
        assert await sem.acquire(timeout=0)
        assert await psem.acquire(timeout=0, lease=60)
        before = threading.active_count(), os_threads()
        tasks = [asyncio.ensure_future(sem.acquire(timeout=60)) for _ in range(500)]
        tasks += [asyncio.ensure_future(psem.acquire(timeout=60, lease=30)) for _ in range(500)]
        assert await until(lambda: listeners(raw, "many") == 1 and listeners(raw, "pmany") == 1)
        await asyncio.sleep(0.2)  # every first try came back busy
        assert (threading.active_count(), os_threads()) == before, \
            "1,000 waiting acquires start no thread"
        assert not any(t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert (threading.active_count(), os_threads()) == before
        await sem.release()
        await asyncio.sleep(0.05)  # a late grant would have come by now
        assert await sem.available() == 1 and await psem.available() == 0, \
            "no cancelled waiter kept a permit"


async def test_semaphores_refuse_several_nodes_and_bad_arguments(server, servers3):
    async with aclient([s.uri for s in servers3]) as c3:
        with pytest.raises(aio.InvalidArgument):
            c3.semaphore("s")
        with pytest.raises(aio.InvalidArgument):
            c3.permit_semaphore("s")
    async with aclient(server.uri) as c:
        with pytest.raises(aio.InvalidArgument):
            c.semaphore("")
        with pytest.raises(aio.InvalidArgument):
            c.semaphore("s", 0)
        with pytest.raises(aio.InvalidArgument):
            c.semaphore("s").acquire(0)
        with pytest.raises(TypeError):
            c.semaphore("s").release("1")
        with pytest.raises(aio.InvalidArgument):
            c.permit_semaphore("p").acquire()  # no lease: expirable permits need one
        with pytest.raises(aio.InvalidArgument):
            await c.permit_semaphore("p", 1).release("not-a-permit-id")
        with pytest.raises(TypeError):
            with c.semaphore("s"):
                pass
        assert repr(c.semaphore("s")) == "<redlockc.asyncio.Semaphore 's'>"
