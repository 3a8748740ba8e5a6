"""redlockc.asyncio on a Sentinel group (redis-sentinel://): the engine finds
the master through the sentinels and follows a failover. Real processes: a
master, a replica, three sentinels (sentinel_servers.py).
"""
import asyncio
import time

import pytest
import pytest_asyncio

import redlockc
import redlockc.asyncio as aio
from aio_wait import until
from redis_servers import RedisServer, free_port
from sentinel_servers import SentinelGroup

pytestmark = pytest.mark.asyncio

# Long enough that a failover (about 1 s here) fits in one lease: the hold
# is then expected to survive on the promoted replica.
WATCHDOG_MS = 6000


@pytest.fixture(scope="module")
def group():
    g = SentinelGroup(name="rlcmaster").start()
    yield g
    g.stop()


@pytest_asyncio.fixture
async def client(group):
    c = aio.Client(group.uri, watchdog_timeout_ms=WATCHDOG_MS)
    yield c
    await c.close()


def master_raw(group):
    host, port = group.current_master()
    return group.server_at(port).raw()


async def test_lock_goes_to_the_master_the_sentinels_name(group, client):
    lock = client.lock("s-basic")
    async with lock:
        with master_raw(group) as raw:
            assert raw.hgetall("s-basic") == {f"{client.uuid}:{lock.owner_id}".encode(): b"1"}
    with master_raw(group) as raw:
        assert not raw.exists("s-basic")
    assert client.quorum == 1, "one sentinel group is one node, whatever its sentinel count"


async def test_a_dead_sentinel_first_in_the_list_is_passed_over(group):
    dead = free_port()
    seeds = ",".join([f"127.0.0.1:{dead}"] + [f"127.0.0.1:{s.port}" for s in group.sentinels])
    async with aio.Client(f"redis-sentinel://{seeds}/{group.name}") as c:
        lock = c.lock("s-dead-first")
        assert await asyncio.wait_for(lock.acquire(timeout=5), 10)
        await lock.release()


async def test_an_unknown_master_name_fails_in_bounded_time_with_the_reason(group):
    seeds = ",".join(f"127.0.0.1:{s.port}" for s in group.sentinels)
    async with aio.Client(f"redis-sentinel://{seeds}/nosuchmaster", io_timeout_ms=500,
                          connect_timeout_ms=500) as c:
        with pytest.raises(redlockc.Error) as e:
            await asyncio.wait_for(c.lock("s-unknown").acquire(timeout=1), 15)
    assert "nosuchmaster" in str(e.value), str(e.value)


async def test_bad_sentinel_uris_are_refused_with_a_clear_message():
    with pytest.raises(redlockc.InvalidArgument) as e:
        aio.Client("redis-sentinel://:secret@127.0.0.1:26379")
    assert "secret" not in str(e.value)
    assert "master" in str(e.value).lower(), str(e.value)


async def test_a_failover_is_followed_and_the_waiter_is_served(group, client):
    """SENTINEL FAILOVER while a watchdog hold is held and a task waits: the
    client follows the new master (+switch-master, or READONLY / a closed
    connection then a new question), the holder is either renewed on the
    new master or told it lost the lock (never silently held-but-gone), and
    the waiter gets the lock after the release."""
    holder = client.lock("s-failover")
    assert await holder.acquire(timeout=5)
    lost = []
    holder.on_lost(lambda lock, err: lost.append(err))
    other = aio.Client(group.uri, watchdog_timeout_ms=WATCHDOG_MS)
    try:
        waiter_lock = other.lock("s-failover")
        waiter = asyncio.ensure_future(waiter_lock.acquire(timeout=30))
        await asyncio.sleep(0)
        old = group.current_master()
        t0 = time.monotonic()
        new_srv = group.failover()
        assert group.current_master() != old

        # Followed: a fresh lock is written on the new master.
        async def probe():
            p = client.lock("s-probe")
            try:
                ok = await asyncio.wait_for(p.acquire(timeout=2), 5)
            except (redlockc.Error, asyncio.TimeoutError):
                return False
            if ok:
                with new_srv.raw() as raw:
                    on_new = raw.exists("s-probe") == 1
                await p.release()
                return on_new
            return False
        followed = False
        for _ in range(40):
            if await probe():
                followed = True
                break
            await asyncio.sleep(0.1)
        follow_s = time.monotonic() - t0
        print(f"asyncio client followed the new master in {follow_s:.2f} s after the failover began")
        assert followed, "the client did not write to the new master"

        # The holder: renewed on the new master, or told it was lost.
        with new_srv.raw() as raw:
            def settled():
                if lost:
                    return "lost"
                f = raw.hgetall("s-failover")
                return "held" if f.get(f"{client.uuid}:{holder.owner_id}".encode()) else None
            state = await until(settled, timeout=10)
            print(f"the holder after the failover: {state} {lost!r}")
            assert state in ("held", "lost"), "the hold is neither on the new master nor reported lost"
            if state == "held":
                first = raw.pttl("s-failover")
                assert await until(lambda: raw.pttl("s-failover") > first, timeout=5), \
                    "the watchdog renews the hold on the new master"
        if state == "held":
            await holder.release()
        else:
            with pytest.raises(redlockc.LockLostError):
                await holder.release()
        assert await asyncio.wait_for(waiter, 30), "the waiter gets the lock"
        with new_srv.raw() as raw:
            assert raw.hgetall("s-failover") == {
                f"{other.uuid}:{waiter_lock.owner_id}".encode(): b"1"}
        await waiter_lock.release()
    finally:
        await other.close()


async def test_a_sentinel_group_is_one_redlock_node_beside_two_masters(group):
    """Redlock over topologies: the sentinel group counts as one node (its
    master holds the key), beside two standalone masters."""
    others = [RedisServer().start(), RedisServer().start()]
    try:
        nodes = ",".join([group.uri] + [s.uri for s in others])
        async with aio.Client(nodes, node_timeout_ms=300) as c:
            assert c.quorum == 2, "3 nodes: the group is one of them"
            lock = c.lock("s-redlock")
            assert await asyncio.wait_for(lock.acquire(timeout=5), 10)
            with master_raw(group) as raw:
                assert raw.exists("s-redlock")
            for s in others:
                with s.raw() as raw:
                    assert raw.exists("s-redlock")
            await lock.release()
            others[1].stop()
            lock2 = c.lock("s-redlock-2")
            assert await asyncio.wait_for(lock2.acquire(timeout=5), 10), "2 of 3 is a quorum"
            await lock2.release()
    finally:
        for s in others:
            s.stop()
