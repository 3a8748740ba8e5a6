"""redlockc.asyncio's fair lock on the engine, against real redis-servers.

The fair lock is an engine lock kind (RLC_KIND_FAIR) in Redisson's RFairLock
layout: the lock's hash and field "<uuid>:<owner>", the queue
redisson_lock_queue:{name}, the waiters' timeouts in the zset
redisson_lock_timeout:{name}, each waiter's own channel
redisson_lock__channel:{name}:<uuid>:<owner>. Every wait is bounded
(asyncio.wait_for, or `until` polling a condition); nothing asserts on
speed: a hand-off bounded by a few seconds under a 30 s lease only tells a
wake-up by the release's message from a wait for the lease to run out.
"""
import asyncio
import os
import threading

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, until

pytestmark = pytest.mark.asyncio

HAND_OFF_S = 5  # far below the 30 s leases: a bound that only a wake-up meets
# A queued waiter tries again every half thread wait to keep its place: with
# 60 s, no such try comes within HAND_OFF_S either.
SLOW_TRIES_S = 60


def queue(name):
    return f"redisson_lock_queue:{{{name}}}"


def timeouts(name):
    return f"redisson_lock_timeout:{{{name}}}"


def hash_of(raw, name):
    return {k.decode(): v.decode() for k, v in raw.hgetall(name).items()}


def queued(raw, name):
    """The queue's entries, first in line first ("<uuid>:<owner>")."""
    return [e.decode() for e in raw.lrange(queue(name), 0, -1)]


def os_threads():
    """The process's threads as the kernel counts them (also those Python did not start)."""
    return len(os.listdir("/proc/self/task"))


async def test_a_fair_lock_writes_redissons_layout_and_is_reentrant(server, raw):
    async with aclient(server.uri) as c:
        f = c.fair_lock("fl", owner=7)
        assert isinstance(f, aio.FairLock) and f.thread_wait == 5.0, "Redisson's 5 s default"
        async with f:
            async with c.fair_lock("fl", owner=7)(timeout=1):
                assert hash_of(raw, "fl") == {f"{c.uuid}:7": "2"}, \
                    "Redisson's RFairLock: the lock's hash and field, two levels"
                assert f.hold_count == 2 and f.owned() and 0 < f.validity <= 30
            assert f.hold_count == 1
            assert raw.pttl("fl") > 20000, "watchdog lease (30 s) on the hash"
            assert c.lock("fl", owner=7).hold_count == 0, "a Lock of the name holds nothing"
        assert not raw.exists("fl") and f.hold_count == 0 and not f.owned()
        with pytest.raises(aio.NotOwnerError):
            await f.release()
        assert repr(f) == "<redlockc.asyncio.FairLock 'fl' owner=7>"
        assert c.fair_lock("fl", None, 0.5).thread_wait == 0.5, \
            "thread_wait is the third argument, as the blocking client's"


async def test_three_waiting_owners_are_handed_the_lock_in_arrival_order(server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        holder = a.fair_lock("fifo", owner=100)
        assert await holder.acquire(timeout=0, lease=30)
        waiters = [c.fair_lock("fifo", owner=1 + i, thread_wait=SLOW_TRIES_S)
                   for i, c in enumerate((a, b, a))]
        tasks = []
        for i, w in enumerate(waiters):  # each joins the queue before the next comes
            tasks.append(asyncio.ensure_future(w.acquire(timeout=60, lease=30)))
            assert await until(lambda: len(queued(raw, "fifo")) == i + 1), f"waiter {i} queued"
        assert queued(raw, "fifo") == [f"{w.client.uuid}:{w.owner_id}" for w in waiters], \
            "the queue holds them in arrival order"
        releaser = holder
        for i, (w, t) in enumerate(zip(waiters, tasks)):
            assert not any(x.done() for x in tasks[i:]), "nobody in line had it before"
            await releaser.release()
            assert await asyncio.wait_for(t, HAND_OFF_S), \
                f"the release woke waiter {i}, first in line (the lease is 30 s)"
            assert hash_of(raw, "fifo") == {f"{w.client.uuid}:{w.owner_id}": "1"}
            assert len(queued(raw, "fifo")) == 2 - i, "a granted waiter leaves the queue"
            releaser = w
        await releaser.release()
        assert not raw.exists("fifo") and not raw.exists(queue("fifo"))
        assert raw.zcard(timeouts("fifo")) == 0


async def test_the_blocking_clients_fair_lock_and_asyncio_wait_for_each_other(server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            b_fair = blocking.fair_lock("mixf", owner=1, thread_wait=SLOW_TRIES_S)
            a_fair = c.fair_lock("mixf", owner=2, thread_wait=SLOW_TRIES_S)
            assert await asyncio.to_thread(b_fair.acquire, timeout=0, lease=30)
            assert not await a_fair.acquire(timeout=0), "the blocking holder excludes asyncio"
            waiting = asyncio.ensure_future(a_fair.acquire(timeout=60, lease=30))
            assert await until(lambda: queued(raw, "mixf") == [f"{c.uuid}:2"]), \
                "the asyncio waiter is in Redisson's queue"
            await asyncio.to_thread(b_fair.release)
            assert await asyncio.wait_for(waiting, HAND_OFF_S), \
                "the blocking release woke the asyncio waiter"
            assert hash_of(raw, "mixf") == {f"{c.uuid}:2": "1"}
            assert not await asyncio.to_thread(b_fair.acquire, timeout=0)
            b_waiting = asyncio.ensure_future(asyncio.to_thread(b_fair.acquire, timeout=60,
                                                                lease=30))
            assert await until(lambda: queued(raw, "mixf") == [f"{blocking.uuid}:1"]), \
                "the blocking waiter is in the queue"
            await a_fair.release()
            assert await asyncio.wait_for(b_waiting, HAND_OFF_S), \
                "the asyncio release woke the blocking waiter"
            assert hash_of(raw, "mixf") == {f"{blocking.uuid}:1": "1"}
            await asyncio.to_thread(b_fair.release)
            assert not raw.exists("mixf") and queued(raw, "mixf") == []
    finally:
        blocking.close()


async def test_cancelling_a_waiting_task_leaves_no_queue_entry_and_no_timeout(server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.fair_lock("fcx", owner=1)
        assert await holder.acquire(timeout=0, lease=30)
        f = c.fair_lock("fcx")
        task = asyncio.ensure_future(f.acquire())
        assert await until(lambda: len(queued(raw, "fcx")) == 1
                           and raw.zcard(timeouts("fcx")) == 1), \
            "it waits in the queue, with its timeout"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert await until(lambda: queued(raw, "fcx") == [] and raw.zcard(timeouts("fcx")) == 0), \
            "the cancelled waiter left the queue and its timeout"
        assert hash_of(raw, "fcx") == {f"{holder_client.uuid}:1": "1"}, \
            "only the holder's field: the cancelled waiter kept nothing"
        await holder.release()
        await asyncio.sleep(0.05)  # a late grant would have come by now; nothing took the lock
        assert not raw.exists("fcx") and queued(raw, "fcx") == []
        assert raw.zcard(timeouts("fcx")) == 0
        assert not f.owned() and f.hold_count == 0


async def test_a_fair_holds_loss_reaches_only_the_fair_lock(server, raw):
    async with aclient(server.uri, watchdog_timeout=3) as c:  # a renewal each second
        fair, lock, rw = c.fair_lock("flost", owner=5), c.lock("flost", owner=5), \
            c.rwlock("flost", owner=5)
        heard = {"fair": [], "lock": [], "read": [], "write": []}
        fair.on_lost(lambda lk, err: heard["fair"].append(err))
        lock.on_lost(lambda lk, err: heard["lock"].append(err))
        rw.read().on_lost(lambda lk, err: heard["read"].append(err))
        rw.write().on_lost(lambda lk, err: heard["write"].append(err))
        assert await fair.acquire(timeout=0)

        async def work():
            fair.cancel_on_lost()
            await asyncio.sleep(60)
        worker = asyncio.ensure_future(work())
        await asyncio.sleep(0)  # the worker registered
        raw.delete("flost")  # taken from under the holder: its next renewal finds it gone
        assert await until(lambda: heard["fair"], timeout=30), "the fair lock heard its loss"
        assert isinstance(heard["fair"][0], aio.LockLostError)
        assert "fair lock 'flost'" in str(heard["fair"][0]), "the message names the kind"
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(worker, 10)  # cancel_on_lost cancelled it
        assert fair.lost.is_set() and fair.hold_count == 0 and not fair.owned()
        assert isinstance(fair.lost_error, aio.LockLostError)
        await asyncio.sleep(0)  # any callback queued for the others has run by now
        assert heard["lock"] == [] and heard["read"] == [] and heard["write"] == [], \
            "no Lock and no read-write side of the same name and owner heard it"
        assert not lock.lost.is_set()
        with pytest.raises(aio.LockLostError):
            await fair.release()


async def test_a_thousand_waiting_fair_waiters_start_no_thread(server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.fair_lock("fmany", owner=1)
        assert await holder.acquire(timeout=0, lease=60)
        before = threading.active_count(), os_threads()
        tasks = [asyncio.ensure_future(c.fair_lock("fmany", owner=100 + i).acquire(
            timeout=60, lease=30)) for i in range(1000)]
        assert await until(lambda: raw.llen(queue("fmany")) == 1000, timeout=30), \
            "every waiter is in the queue"
        assert (threading.active_count(), os_threads()) == before, \
            "waiting fair waiters start no thread"
        assert not any(t.done() for t in tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert await until(lambda: raw.llen(queue("fmany")) == 0
                           and raw.zcard(timeouts("fmany")) == 0, timeout=30), \
            "every cancelled waiter left the queue and its timeout"
        assert (threading.active_count(), os_threads()) == before
        await holder.release()
        assert not raw.exists("fmany")


async def test_a_fair_lock_over_several_nodes_is_refused(servers3):
    async with aclient([s.uri for s in servers3]) as c:
        with pytest.raises(aio.InvalidArgument):
            c.fair_lock("fair")


async def test_a_fair_lock_refuses_bad_arguments(server):
    async with aclient(server.uri) as c:
        with pytest.raises(aio.InvalidArgument):
            c.fair_lock("")
        with pytest.raises(aio.InvalidArgument):
            c.fair_lock("x", owner=2**61)
        with pytest.raises(aio.InvalidArgument):
            c.fair_lock("x", thread_wait=0)
        with pytest.raises(TypeError):
            c.fair_lock("x").acquire(lease="5")
