"""redlockc.asyncio's read-write lock on the engine, against real redis-servers.

Each side is an engine lock kind in Redisson's RReadWriteLock layout: the
write side (RLC_KIND_WRITE) hash field "<uuid>:<owner>:write", mode "write",
the waiting writers in the zset redlockc_rwlock_writers:{name}; the read side
(RLC_KIND_READ) field "<uuid>:<owner>", mode "read", one timeout key
"{name}:<uuid>:<owner>:rwlock_timeout:<level>" per level. Every wait is
bounded (asyncio.wait_for, or `until` polling a condition); nothing asserts
on speed: a hand-off bounded by a few seconds under a 30 s lease only tells
a wake-up by the release's message from a wait for the lease to run out.
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


async def test_each_side_is_one_object_of_its_rwlock(server):
    async with aclient(server.uri) as c:
        rw = c.rwlock("r")
        assert rw.write() is rw.write() and rw.read() is rw.read()
        assert isinstance(rw.read(), aio.ReadLock) and rw.read().rwlock is rw
        assert repr(rw.write()) == "<write side of <redlockc.asyncio.ReadWriteLock 'r' owner=task>>"
        assert repr(rw.read()) == "<read side of <redlockc.asyncio.ReadWriteLock 'r' owner=task>>"


async def test_write_side_refuses_bad_arguments(server):
    async with aclient(server.uri) as c:
        with pytest.raises(aio.InvalidArgument):
            c.rwlock("")
        with pytest.raises(aio.InvalidArgument):
            c.rwlock("x", owner=2**61)
        with pytest.raises(TypeError):
            c.rwlock("x").write().acquire(lease="5")


# ---- the read side ------------------------------------------------------------------


def timeout_keys(raw, name):
    """A reader's timeout keys of the lock name (one per read level)."""
    return sorted(k.decode() for k in raw.keys(f"{{{name}}}:*rwlock_timeout*"))


HAND_OFF_S = 5  # far below the 30 s watchdog lease: a bound that only a wake-up meets


async def test_readers_of_two_clients_overlap_in_redissons_layout(server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        ra, rb = a.rwlock("rd", owner=1).read(), b.rwlock("rd", owner=2).read()
        assert await a.rwlock("rd").mode() is None
        assert await ra.acquire(timeout=0)
        assert await rb.acquire(timeout=0), "a reader of another client shares the lock"
        assert hash_of(raw, "rd") == {"mode": "read", f"{a.uuid}:1": "1", f"{b.uuid}:2": "1"}, \
            "Redisson's layout: mode read, each reader's field <uuid>:<owner>"
        assert timeout_keys(raw, "rd") == sorted([f"{{rd}}:{a.uuid}:1:rwlock_timeout:1",
                                                  f"{{rd}}:{b.uuid}:2:rwlock_timeout:1"])
        assert raw.pttl("rd") > 20000, "watchdog lease (30 s) on the hash"
        assert ra.hold_count == 1 and ra.owned() and 0 < ra.validity <= 30
        assert await a.rwlock("rd").mode() == "read"
        assert not await a.rwlock("rd", owner=3).write().acquire(timeout=0), "no writer beside"
        await ra.release()
        assert hash_of(raw, "rd") == {"mode": "read", f"{b.uuid}:2": "1"}
        assert ra.hold_count == 0 and not ra.owned() and rb.owned()
        await rb.release()
        assert not raw.exists("rd") and timeout_keys(raw, "rd") == []
        assert await a.rwlock("rd").mode() is None


async def test_a_reader_is_reentrant_and_counts_its_levels_apart_from_the_write_side(
        server, raw):
    async with aclient(server.uri) as c:
        rw = c.rwlock("rre")
        r = rw.read()
        async with r:
            async with c.rwlock("rre").read()(timeout=1):
                assert r.hold_count == 2 and rw.write().hold_count == 0
                assert hash_of(raw, "rre")[f"{c.uuid}:{r.owner_id}"] == "2"
                assert len(timeout_keys(raw, "rre")) == 2, "one timeout key per level"
            assert r.hold_count == 1 and len(timeout_keys(raw, "rre")) == 1
        assert not raw.exists("rre") and timeout_keys(raw, "rre") == []
        with pytest.raises(aio.NotOwnerError):
            await r.release()


async def test_a_writer_waits_for_every_reader_and_the_last_release_wakes_it(server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        ra, rb = a.rwlock("w4r", owner=1).read(), b.rwlock("w4r", owner=2).read()
        assert await ra.acquire(timeout=0) and await rb.acquire(timeout=0)
        w = b.rwlock("w4r", owner=3).write()
        waiting = asyncio.ensure_future(w.acquire(timeout=60))
        assert await until(lambda: raw.zcard(writers("w4r")) == 1), "the writer waits"
        await ra.release()
        assert await until(lambda: hash_of(raw, "w4r") == {"mode": "read", f"{b.uuid}:2": "1"})
        assert not waiting.done(), "one reader is left: the writer still waits"
        await rb.release()
        assert await asyncio.wait_for(waiting, HAND_OFF_S), \
            "the last reader's release woke the writer (the lease is 30 s)"
        assert hash_of(raw, "w4r") == {"mode": "write", f"{b.uuid}:3:write": "1"}
        assert await a.rwlock("w4r").mode() == "write"
        await w.release()


async def test_readers_wait_for_a_writer_and_its_release_wakes_them_all(server, raw):
    async with aclient(server.uri) as a, aclient(server.uri) as b:
        w = a.rwlock("r4w", owner=1).write()
        assert await w.acquire(timeout=0)
        readers = [c.rwlock("r4w", owner=10 + i).read() for i, c in enumerate((a, b, a, b))]
        waiting = [asyncio.ensure_future(r.acquire(timeout=60)) for r in readers]
        assert await until(lambda: rw_subscribers(raw, "r4w") == 2), \
            "both clients wait on the read-write lock's channel"
        for c in (a, b):
            assert await until_async(lambda: settled(raw, c.rwlock("r4w"))), "the readers sleep"
        assert not any(t.done() for t in waiting)
        await w.release()
        assert await asyncio.wait_for(asyncio.gather(*waiting), HAND_OFF_S) == [True] * 4, \
            "the writer's release woke every waiting reader (the lease is 30 s)"
        fields = {f"{r.client.uuid}:{r.owner_id}": "1" for r in readers}
        assert hash_of(raw, "r4w") == {"mode": "read", **fields}
        for r in readers:
            await r.release()
        assert not raw.exists("r4w") and timeout_keys(raw, "r4w") == []


async def test_the_write_holder_takes_read_levels_and_keeps_them_past_its_write(server, raw):
    async with aclient(server.uri) as c, aclient(server.uri) as other:
        rw = c.rwlock("wr")
        w, r = rw.write(), rw.read()
        assert await w.acquire(timeout=0)
        assert await r.acquire(timeout=0), "the writer reads"
        assert hash_of(raw, "wr") == {"mode": "write", f"{c.uuid}:{w.owner_id}:write": "1",
                                      f"{c.uuid}:{r.owner_id}": "1"}
        assert w.hold_count == 1 and r.hold_count == 1
        assert not await elsewhere(r.acquire, timeout=0), "another task's reader waits"
        assert not await other.rwlock("wr", owner=1).read().acquire(timeout=0)
        await w.release()
        assert await rw.mode() == "read", "its read level is left: the lock is read-held"
        assert w.hold_count == 0 and r.hold_count == 1
        assert await other.rwlock("wr", owner=1).read().acquire(timeout=0), "readers share it now"
        await other.rwlock("wr", owner=1).read().release()
        await r.release()
        assert not raw.exists("wr") and timeout_keys(raw, "wr") == []


async def test_cancelling_a_waiting_reader_leaves_no_field_and_no_timeout_key(server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.rwlock("rcx", owner=1).write()
        assert await holder.acquire(timeout=0, lease=30)
        r = c.rwlock("rcx").read()
        task = asyncio.ensure_future(r.acquire())
        assert await until(lambda: rw_subscribers(raw, "rcx") == 1), "it waits on the channel"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert await until(lambda: rw_subscribers(raw, "rcx") == 0), \
            "no one waits on the channel any more"
        assert hash_of(raw, "rcx") == {"mode": "write", f"{holder_client.uuid}:1:write": "1"}, \
            "only the holder's field: the cancelled reader kept nothing"
        assert timeout_keys(raw, "rcx") == []
        await holder.release()
        await asyncio.sleep(0.05)  # a late grant would have come by now; nothing took the lock
        assert not raw.exists("rcx") and timeout_keys(raw, "rcx") == []
        assert not r.owned() and r.hold_count == 0


async def test_a_read_holds_loss_reaches_its_read_side_only(server, raw):
    async with aclient(server.uri, watchdog_timeout=3) as c:  # a renewal each second
        rw = c.rwlock("rlost", owner=5)
        lock = c.lock("rlost", owner=5)
        heard = {"read": [], "write": [], "lock": []}
        rw.read().on_lost(lambda lk, err: heard["read"].append(err))
        rw.write().on_lost(lambda lk, err: heard["write"].append(err))
        lock.on_lost(lambda lk, err: heard["lock"].append(err))
        assert await rw.read().acquire(timeout=0)
        raw.delete("rlost")  # taken from under the reader: its next renewal finds it gone
        assert await until(lambda: heard["read"], timeout=30), "the read side heard its loss"
        assert isinstance(heard["read"][0], aio.LockLostError)
        assert "read lock 'rlost'" in str(heard["read"][0]), "the message names the side"
        assert rw.read().lost.is_set() and rw.read().hold_count == 0
        await asyncio.sleep(0)  # any callback queued for the others has run by now
        assert heard["write"] == [] and heard["lock"] == [], \
            "neither the write side nor the Lock of the same name and owner heard it"
        with pytest.raises(aio.LockLostError):
            await rw.read().release()


def script_calls(raw):
    """How many scripts the server has run (every try, release and renewal)."""
    stats = raw.info("commandstats")
    return sum(stats.get(k, {}).get("calls", 0) for k in ("cmdstat_evalsha", "cmdstat_eval"))


async def settled(raw, rw):
    """True once no script reached the server during a round trip of rw's
    client: its waiters' tries (those the subscription's confirmation
    starts) have all been answered, so each waiter sleeps."""
    before = script_calls(raw)
    await rw.mode()  # after every command the client wrote before it
    return script_calls(raw) == before


async def until_async(condition, tries=100):
    for _ in range(tries):
        if await condition():
            return True
    return False


async def wait_for_readers(raw, c, tasks, name, waits_before):
    assert await until(lambda: c.metrics()["waits"] - waits_before == len(tasks), timeout=30), \
        "every reader waits"
    assert await until(lambda: rw_subscribers(raw, name) >= 1), "on the lock's channel"


async def test_a_thousand_waiting_readers_start_no_thread_and_one_release_wakes_them(
        server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.rwlock("rmany", owner=1).write()
        assert await holder.acquire(timeout=0, lease=60)
        before = threading.active_count()
        waits = c.metrics()["waits"]
        readers = [c.rwlock("rmany", owner=100 + i).read() for i in range(1000)]
        tasks = [asyncio.ensure_future(r.acquire(timeout=60, lease=30)) for r in readers]
        await wait_for_readers(raw, c, tasks, "rmany", waits)
        assert threading.active_count() == before, "waiting readers start no thread"
        assert await until_async(lambda: settled(raw, c.rwlock("rmany"))), "they all sleep"
        await holder.release()
        assert await asyncio.wait_for(asyncio.gather(*tasks), 30) == [True] * 1000, \
            "the writer's release let every reader in"
        assert raw.hlen("rmany") == 1001, "mode and 1,000 readers' fields"
        assert threading.active_count() == before
        for r in readers:  # one by one: each reader's release reads the others' levels
            await r.release()
        assert not raw.exists("rmany") and timeout_keys(raw, "rmany") == []


# A write unlock wakes every waiter, those whose try is out too: such a try
# may have run before the release, and its busy answer sends it to try again
# at once (engine_sub.c's rewake). Before, those slept on, woken one per
# safety poll (1 s), and about 50 of the 1,000 were late.
async def test_readers_whose_try_is_in_flight_at_the_writers_release_are_woken_too(
        server, raw):
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.rwlock("rfly", owner=1).write()
        assert await holder.acquire(timeout=0, lease=60)
        waits = c.metrics()["waits"]
        readers = [c.rwlock("rfly", owner=100 + i).read() for i in range(1000)]
        tasks = [asyncio.ensure_future(r.acquire(timeout=60, lease=30)) for r in readers]
        await wait_for_readers(raw, c, tasks, "rfly", waits)
        await holder.release()  # while the confirmation's tries may still be out
        try:
            done, _ = await asyncio.wait(tasks, timeout=HAND_OFF_S)
            assert len(done) == 1000, "the writer's release let every reader in"
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_readers_and_writers_of_the_blocking_client_and_asyncio_share_one_lock(
        server, raw):
    blocking = redlockc.Client(server.uri)
    try:
        async with aclient(server.uri) as c:
            b_read = blocking.rwlock("mix", owner=1).read()
            b_write = blocking.rwlock("mix", owner=2).write()
            a_rw = c.rwlock("mix", owner=3)
            assert await asyncio.to_thread(b_read.acquire, timeout=0)
            assert await a_rw.read().acquire(timeout=0), "readers of both clients overlap"
            assert await a_rw.mode() == "read" and blocking.rwlock("mix").mode == "read"
            assert not await a_rw.write().acquire(timeout=0), "no writer beside them"
            assert not await asyncio.to_thread(b_write.acquire, timeout=0)
            await a_rw.read().release()
            writer = asyncio.ensure_future(a_rw.write().acquire(timeout=60))
            assert await until(lambda: raw.zcard(writers("mix")) == 1), "the asyncio writer waits"
            assert not await asyncio.to_thread(blocking.rwlock("mix", owner=4).read().acquire,
                                               timeout=0), "a waiting writer holds back readers"
            await asyncio.to_thread(b_read.release)
            assert await asyncio.wait_for(writer, HAND_OFF_S), \
                "the blocking reader's release woke the asyncio writer"
            assert blocking.rwlock("mix").mode == "write"
            reader = asyncio.to_thread(b_read.acquire, timeout=60)
            reader = asyncio.ensure_future(reader)
            await asyncio.sleep(0.05)
            assert not reader.done()
            await a_rw.write().release()
            assert await asyncio.wait_for(reader, HAND_OFF_S), \
                "the asyncio writer's release woke the blocking reader"
            assert hash_of(raw, "mix") == {"mode": "read", f"{blocking.uuid}:1": "1"}
            await asyncio.to_thread(b_read.release)
            assert not raw.exists("mix")
    finally:
        blocking.close()
