"""redlockc.asyncio on a Redis Cluster (redis-cluster://): the engine routes
each lock to its slot's master, follows MOVED, and waits through sharded
pub/sub. Real processes: 3 masters, 3 replicas (cluster_servers.py).
"""
import asyncio
import socket

import pytest
import pytest_asyncio

import redlockc.asyncio as aio
from cluster_servers import RedisCluster

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def cluster():
    c = RedisCluster().start()
    yield c
    c.stop()


@pytest_asyncio.fixture
async def client(cluster):
    c = aio.Client(cluster.uri, watchdog_timeout_ms=1500)
    yield c
    await c.close()


async def test_locks_on_many_names_land_on_their_slots_masters(cluster, client):
    names = [f"cl-many-{i}" for i in range(60)]
    masters = set()
    for name in names:
        lock = client.lock(name)
        assert await asyncio.wait_for(lock.acquire(timeout=5), 10), name
        owner = cluster.master_of(name)
        masters.add(owner.port)
        with owner.raw() as raw:
            assert raw.hgetall(name) == {f"{client.uuid}:{lock.owner_id}".encode(): b"1"}, name
        await lock.release()
        with owner.raw() as raw:
            assert not raw.exists(name), name
    assert len(masters) == 3, "60 names spread over every master"
    assert client.quorum == 1, "one cluster is one node"


async def test_reentrant_and_renewed_on_its_master(cluster, client):
    lock = client.lock("cl-renew")
    assert await lock.acquire()
    assert await lock.acquire()
    owner = cluster.master_of("cl-renew")
    with owner.raw() as raw:
        assert raw.hgetall("cl-renew") == {f"{client.uuid}:{lock.owner_id}".encode(): b"2"}
        # Held past two leases (1.5 s each): only renewals keep the key.
        await asyncio.sleep(3.5)
        assert raw.pttl("cl-renew") > 0, "the watchdog renews on the slot's master"
    await lock.release()
    await lock.release()


async def test_a_waiter_is_woken_by_a_sharded_unlock_message(cluster, client):
    """The waiter SSUBSCRIBEs on the slot's master (PUBSUB SHARDNUMSUB sees
    it) and the release SPUBLISHes there (a raw listener gets an smessage)."""
    name = "cl-wake"
    channel = f"redisson_lock__channel:{{{name}}}"
    owner = cluster.master_of(name)
    listener = socket.create_connection(("127.0.0.1", owner.port), timeout=5)
    try:
        listener.sendall(f"*2\r\n$10\r\nSSUBSCRIBE\r\n${len(channel)}\r\n{channel}\r\n".encode())
        got = b""
        while b"ssubscribe" not in got:
            got += listener.recv(4096)
        holder = client.lock(name)
        assert await holder.acquire()
        other = aio.Client(cluster.uri)
        try:
            waiter = asyncio.ensure_future(other.lock(name).acquire(timeout=10))
            with owner.raw() as raw:
                def subscribers():
                    return raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1]
                loop = asyncio.get_running_loop()
                end = loop.time() + 5
                while subscribers() < 2 and loop.time() < end:
                    await asyncio.sleep(0.02)
                assert subscribers() == 2, "the waiter SSUBSCRIBEd on the slot's master"
            assert not waiter.done()
            await holder.release()
            assert await asyncio.wait_for(waiter, 10)
            got = b""
            listener.settimeout(5)
            while b"smessage" not in got:
                chunk = listener.recv(4096)
                if not chunk:
                    break
                got += chunk
            assert b"smessage" in got, f"the release SPUBLISHed on the slot's master: {got!r}"
        finally:
            await other.close()
    finally:
        listener.close()


async def test_two_clients_exclude_each_other_on_every_name(cluster):
    a, b = aio.Client(cluster.uri), aio.Client(cluster.uri)
    inside = {}
    overlaps = 0

    async def worker(c, name):
        nonlocal overlaps
        for _ in range(5):
            lock = c.lock(name)
            assert await asyncio.wait_for(lock.acquire(timeout=10), 20)
            inside[name] = inside.get(name, 0) + 1
            if inside[name] > 1:
                overlaps += 1
            await asyncio.sleep(0.005)
            inside[name] -= 1
            await lock.release()
    try:
        await asyncio.gather(*[worker(c, f"cl-ex-{i}") for i in range(8) for c in (a, b)])
    finally:
        await a.close()
        await b.close()
    assert overlaps == 0


async def test_a_failover_keeps_locks_working(cluster):
    """CLUSTER FAILOVER on a replica: its master's slots move; locks on them
    keep working (MOVED, or a closed connection, makes the engine ask the
    map again)."""
    c = aio.Client(cluster.uri)
    try:
        name = "cl-failover"
        old = cluster.master_of(name)
        lock = c.lock(name)
        assert await lock.acquire(timeout=5)
        await lock.release()
        replica = None
        for s in cluster.servers:
            with s.raw() as r:
                info = r.info("replication")
                if info.get("role") == "slave" and int(info.get("master_port", 0)) == old.port:
                    replica = s
        assert replica is not None
        loop = asyncio.get_running_loop()
        # A manual failover the master did not answer in time (a loaded
        # machine) is abandoned by the replica: ask again, a bounded number
        # of times (seen with Valkey 8 under load: still the old master 20 s
        # after one CLUSTER FAILOVER).
        for _ in range(3):
            with replica.raw() as r:
                r.execute_command("CLUSTER", "FAILOVER")
            end = loop.time() + 10
            while cluster.master_of(name).port == old.port and loop.time() < end:
                await asyncio.sleep(0.05)
            if cluster.master_of(name).port != old.port:
                break
        assert cluster.master_of(name).port == replica.port
        ok = False
        for _ in range(40):
            try:
                ok = await asyncio.wait_for(lock.acquire(timeout=2), 5)
            except Exception:  # noqa: BLE001 (a request caught in the switch)
                ok = False
            if ok:
                break
            await asyncio.sleep(0.1)
        assert ok, "a lock after the failover"
        with replica.raw() as raw:
            assert raw.exists(name), "written on the new master"
        await lock.release()
    finally:
        await c.close()


async def test_a_deleted_key_on_its_master_is_pushed_at_once(cluster):
    # 30 s lease: the next renewal is 10 s away. Loss push keeps a tracking
    # pair per master of the cluster, so the DEL is heard within a round trip.
    c = aio.Client(cluster.uri, watchdog_timeout=30)
    try:
        lock = c.lock("cl-pushed")
        assert await lock.acquire()
        owner = cluster.master_of("cl-pushed")
        with owner.raw() as raw:
            # the hold joins loss push after its 50 ms grace, then its key is tracked
            for _ in range(300):
                if int(raw.info("stats")["tracking_total_keys"]) >= 1:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the lock key was never registered on its master")
            assert raw.delete("cl-pushed") == 1
        await asyncio.wait_for(lock.lost.wait(), 2)
        assert isinstance(lock.lost_error, aio.LockLostError), repr(lock.lost_error)
    finally:
        await c.close()
