"""Interop on a Redis Cluster: Redisson's own lock and unlock scripts, replayed
by a stock cluster client (redis-py's RedisCluster, which routes each EVAL by
its keys' slot), against this library's blocking and asyncio clients on the
same names. Each excludes the other, and a waiter of ours is woken by
Redisson's sharded unlock message (SPUBLISH, as Redisson publishes on a
Redis 7 cluster).
"""
import asyncio
import threading
import time

import pytest
from redis.cluster import RedisCluster as StockCluster

import redlockc
import redlockc.asyncio as aio
from cluster_servers import RedisCluster
from redis_servers import wait_until

REDISSON_FIELD = "0b6d2c1e-7f3a-4c5d-9e8f-102132435465:1"

# tryLockInnerAsync (../shared/REDISSON.md): nil when taken, else the PTTL.
TRY_LOCK = """
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"""

# unlockInnerAsync without the latch; ARGV[4] is the publish command.
UNLOCK = """
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1
"""


def channel(name):
    return f"redisson_lock__channel:{{{name}}}"


@pytest.fixture(scope="module")
def cluster():
    c = RedisCluster().start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def redisson(cluster):
    port = cluster.masters()[0].port
    rc = StockCluster(host="127.0.0.1", port=port, socket_timeout=5)
    yield rc
    rc.close()


def redisson_try(rc, name, lease_ms=30000):
    return rc.eval(TRY_LOCK, 1, name, lease_ms, REDISSON_FIELD)


def redisson_unlock(rc, name):
    return rc.eval(UNLOCK, 2, name, channel(name), 0, 30000, REDISSON_FIELD, "spublish")


def shard_subscribers(cluster, name):
    with cluster.master_of(name).raw() as r:
        return r.execute_command("PUBSUB", "SHARDNUMSUB", channel(name))[1]


NAMES = [f"interop-{i}" for i in range(6)]


def test_redisson_holds_block_the_blocking_client_and_its_unlock_wakes_it(cluster, redisson):
    client = redlockc.Client(cluster.uri)
    try:
        for name in NAMES:
            assert redisson_try(redisson, name) is None, "Redisson takes it"
            lock = client.lock(name)
            assert lock.acquire(blocking=False) is False, f"{name}: Redisson's hold blocks us"
            got = {}

            def wait():
                got["ok"] = lock.acquire(timeout=10)
                if got["ok"]:
                    got["field"] = f"{client.uuid}:{redlockc.thread_owner()}".encode()
                    with cluster.master_of(name).raw() as r:
                        got["hash"] = r.hgetall(name)
                    lock.release()

            t = threading.Thread(target=wait)
            t.start()
            assert wait_until(lambda: shard_subscribers(cluster, name) == 1, timeout=5), \
                "our waiter SSUBSCRIBEd on the slot's master"
            assert redisson_unlock(redisson, name) == 1
            t.join(15)
            assert got.get("ok") is True, f"{name}: woken after Redisson's unlock"
            assert got["hash"] == {got["field"]: b"1"}, f"{name}: ours alone now"
    finally:
        client.close()


def test_our_holds_block_redisson_until_released(cluster, redisson):
    client = redlockc.Client(cluster.uri)
    try:
        for name in NAMES:
            lock = client.lock(name)
            assert lock.acquire(timeout=5)
            pttl = redisson_try(redisson, name)
            assert isinstance(pttl, int) and pttl > 0, f"{name}: Redisson sees it held ({pttl})"
            assert redisson_unlock(redisson, name) is None, "Redisson is not the owner"
            lock.release()
            assert redisson_try(redisson, name) is None, f"{name}: free for Redisson now"
            assert redisson_unlock(redisson, name) == 1
    finally:
        client.close()


def test_the_asyncio_client_and_redisson_exclude_each_other(cluster, redisson):
    async def main():
        async with aio.Client(cluster.uri) as c:
            for name in NAMES:
                lock = c.lock(name)
                assert await lock.acquire(timeout=5)
                assert isinstance(redisson_try(redisson, name), int), "held by us"
                await lock.release()
                assert redisson_try(redisson, name) is None
                waiter = asyncio.ensure_future(lock.acquire(timeout=10))
                loop = asyncio.get_running_loop()
                end = loop.time() + 5
                while shard_subscribers(cluster, name) < 1 and loop.time() < end:
                    await asyncio.sleep(0.02)
                assert not waiter.done(), "Redisson's hold blocks the asyncio waiter"
                started = time.monotonic()
                assert redisson_unlock(redisson, name) == 1
                assert await asyncio.wait_for(waiter, 15)
                assert time.monotonic() - started < 10
                await lock.release()
    asyncio.run(main())
