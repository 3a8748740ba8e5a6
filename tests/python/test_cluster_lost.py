"""Loss pushed at once on a Redis Cluster, blocking API: the client keeps a
CLIENT TRACKING pair per master, so with a 30 s lease (renewals 10 s apart)
a DEL on the lock's master fires on_lost within a round trip or two. Real
processes: 3 masters, 3 replicas (cluster_servers.py).
"""
import threading

import pytest

import redlockc
from cluster_servers import RedisCluster
from redis_servers import wait_until


@pytest.fixture(scope="module")
def cluster():
    c = RedisCluster().start()
    yield c
    c.stop()


def test_a_deleted_key_on_its_master_fires_on_lost_at_once(cluster):
    client = redlockc.Client(cluster.uri, watchdog_timeout=30)
    try:
        names = [f"blost-{i}" for i in range(12)]
        locks = [client.lock(n) for n in names]
        fired = {}
        done = threading.Event()
        for lock in locks:
            lock.on_lost(lambda which, error: (fired.setdefault(which.name, error), done.set()))
            assert lock.acquire()
        masters = {cluster.master_of(n).port for n in names}
        assert len(masters) == 3, "the names spread over the 3 masters"
        victim = names[5]
        owner = cluster.master_of(victim)
        mine = sum(cluster.master_of(n).port == owner.port for n in names)
        with owner.raw() as raw:
            # holds join loss push after a 50 ms grace, then their keys are tracked
            assert wait_until(lambda: int(raw.info("stats")["tracking_total_keys"]) >= mine, 5), \
                f"the {mine} keys on the victim's master were not all registered"
            assert raw.delete(victim) == 1
        assert done.wait(2), "on_lost did not fire within 2 s of the DEL (renewal in 10 s)"
        assert list(fired) == [victim], f"only the deleted lock is lost: {list(fired)}"
        assert isinstance(fired[victim], redlockc.LockLostError)
        for lock in locks:
            if lock.name != victim:
                lock.release()
    finally:
        client.close()
