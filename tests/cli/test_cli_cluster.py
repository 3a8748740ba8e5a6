"""redlockc with a redis-cluster:// node: the command runs holding the lock on
the master of its hash slot (a 3-master, 3-replica cluster of real processes
made with redis-cli --cluster create, stopped by pid)."""
import subprocess

import pytest

from clitools import Redis, free_port, run, status_and_watch_follow_a_holder, wait_until


@pytest.fixture(scope="module")
def cluster():
    # the bus port given, not port + 10000 (taken, or past 65535)
    nodes = [Redis("--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                   "--cluster-port", str(free_port())) for _ in range(6)]
    try:
        subprocess.run(["redis-cli", "--cluster", "create"] +
                       [f"127.0.0.1:{n.port}" for n in nodes] +
                       ["--cluster-replicas", "1", "--cluster-yes"],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True)
        wait_until(lambda: all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in nodes),
                   timeout=30, what="cluster_state:ok")
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def test_cmd_runs_holding_the_lock_on_its_slots_master(cli, cluster, name):
    uri = "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster[:2])
    port = cluster[0].port
    slots = set()
    for i in range(8):
        key = f"{name}-{i}"
        # redis-cli -c follows MOVED: it asks the master of the key's slot.
        r = run(cli, uri, key, "--", "redis-cli", "-c", "-p", str(port), "--raw", "EXISTS", key)
        assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
        assert r.stdout.strip() == "1", f"{key}: held on its slot's master while CMD ran"
        after = subprocess.run(["redis-cli", "-c", "-p", str(port), "--raw", "EXISTS", key],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        assert after == "0", f"{key}: released after CMD"
        slots.add(int(cluster[0].cli("CLUSTER", "KEYSLOT", key)))
    assert len(slots) > 1, "the names hash to several slots"


def test_status_and_watch_on_a_cluster_ask_the_slots_master(cli, cluster, name):
    uri = "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in cluster[:2])
    status_and_watch_follow_a_holder(cli, uri, name)
