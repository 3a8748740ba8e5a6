"""rediss-cluster://: a 3+3 Redis Cluster whose clients, replication and
cluster bus speak TLS (tls-cluster yes; CLUSTER SLOTS and MOVED then name
the TLS ports), reached by the blocking client (OpenSSL in the C library) and
by redlockc.asyncio (Python's ssl). Each node keeps a plain port to look at.
"""
import asyncio
import subprocess

import pytest
import redis

import redis_servers
import redlockc
import redlockc.asyncio as aio
from redis_servers import TlsRedisServer, wait_until

_free_port = redis_servers.free_port


def low_port():
    """A free port with room above it for the cluster bus (port + 10000)."""
    for _ in range(200):
        p = _free_port()
        if p <= 55000:
            return p
    raise RuntimeError("no free port below 55000")


@pytest.fixture(scope="module")
def tls_cluster(certs, monkeypatch_module):
    monkeypatch_module.setattr(redis_servers, "free_port", low_port)
    nodes = []
    try:
        for _ in range(6):
            nodes.append(TlsRedisServer(
                certs, False, "--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                "--cluster-port", str(_free_port()),
                "--tls-cluster", "yes", "--tls-replication", "yes",
                "--tls-client-cert-file", f"{certs}/client.crt",
                "--tls-client-key-file", f"{certs}/client.key").start())
        subprocess.run(["redis-cli", "--tls", "--cacert", f"{certs}/ca.crt", "--cluster", "create"] +
                       [f"127.0.0.1:{n.tls_port}" for n in nodes] +
                       ["--cluster-replicas", "1", "--cluster-yes"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True)
        assert wait_until(lambda: all(b"cluster_state:ok" in n.raw().execute_command(
            "CLUSTER", "INFO") for n in nodes), timeout=30, interval=0.05)
        uri = "rediss-cluster://" + ",".join(f"127.0.0.1:{n.tls_port}" for n in nodes[:3])
        yield uri, certs, nodes
    finally:
        for n in nodes:
            n.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def masters_with(nodes, name):
    """The masters that have the key (the others answer MOVED)."""
    out = []
    for n in nodes:
        with n.raw() as r:
            try:
                if r.info("replication")["role"] == "master" and r.exists(name):
                    out.append(n.port)
            except redis.ResponseError:
                pass
    return out


def test_the_blocking_client_locks_on_every_master_over_tls(tls_cluster):
    uri, certs, nodes = tls_cluster
    used = set()
    with redlockc.Client(uri, tls_ca_file=f"{certs}/ca.crt") as c:
        for i in range(24):
            name = f"tlscl-{i}"
            lock = c.lock(name)
            assert lock.acquire(timeout=5), name
            on = masters_with(nodes, name)
            assert len(on) == 1, f"{name} on one master: {on}"
            used.add(on[0])
            lock.release()
            assert not masters_with(nodes, name)
    assert len(used) == 3


def test_the_asyncio_client_locks_over_tls_and_excludes_the_blocking_one(tls_cluster):
    uri, certs, nodes = tls_cluster

    async def main():
        async with aio.Client(uri, tls_ca_file=f"{certs}/ca.crt") as a:
            with redlockc.Client(uri, tls_ca_file=f"{certs}/ca.crt") as b:
                for i in range(12):
                    name = f"tlscl-a{i}"
                    lock = a.lock(name)
                    assert await lock.acquire(timeout=5), name
                    assert len(masters_with(nodes, name)) == 1
                    assert b.lock(name).acquire(blocking=False) is False
                    await lock.release()
    asyncio.run(main())


def test_a_wrong_ca_is_a_clear_error(tls_cluster):
    uri, certs, _ = tls_cluster
    with redlockc.Client(uri, tls_ca_file=f"{certs}/other-ca.crt", connect_timeout_ms=500,
                         io_timeout_ms=500) as c:
        with pytest.raises(redlockc.Error) as info:
            c.lock("tlscl-bad").acquire(timeout=1)
    assert "certificate" in str(info.value).lower() or "tls" in str(info.value).lower(), \
        str(info.value)
