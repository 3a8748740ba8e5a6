"""redis-sentinel:// through the Python binding: a smoke test.

A master and one sentinel that monitors it (real processes, stopped by pid);
the client names the sentinels and the master, and the lock lands on the
master the sentinel names. Failover itself is tested in tests/c/test_sentinel.c.
"""
import os
import subprocess

import pytest

import redlockc
from redis_servers import RedisServer, free_port, wait_until


class Sentinel(RedisServer):
    """redis-server <conf> --sentinel, its config file in its own directory."""

    def __init__(self, conf_text):
        super().__init__()
        self.conf = os.path.join(self.dir, "sentinel.conf")
        with open(self.conf, "w") as f:
            f.write(conf_text)

    def _spawn(self):
        args = ["redis-server", self.conf, "--sentinel", "--port", str(self.port),
                "--bind", "127.0.0.1", "--daemonize", "no", "--dir", self.dir,
                "--logfile", "sentinel.log", "--protected-mode", "no"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        up = wait_until(lambda: self.proc.poll() is not None or self.ping(), timeout=10,
                        interval=0.01)
        if up and self.proc.poll() is None:
            return True
        self.kill()
        return False


@pytest.fixture
def sentinel_of(server):
    """A sentinel monitoring `server` as master "mym"; stopped after the test."""
    s = Sentinel(f"sentinel monitor mym 127.0.0.1 {server.port} 1\n").start()
    yield s
    s.stop()


def test_lock_through_a_sentinel_lands_on_its_master(server, sentinel_of, clients):
    dead = free_port()  # the first sentinel of the list is down
    client = clients(f"redis-sentinel://127.0.0.1:{dead},127.0.0.1:{sentinel_of.port}/mym")
    assert client.quorum == 1 and len(client.nodes) == 1, client.nodes
    lock = client.lock("py-sentinel")
    assert lock.acquire(blocking=False, lease=10)
    assert server.raw().exists("py-sentinel") == 1, "held on the master the sentinel names"
    lock.release()
    assert server.raw().exists("py-sentinel") == 0


def test_unknown_master_name_raises_connection_error_naming_it(server, sentinel_of, clients):
    client = clients(f"redis-sentinel://127.0.0.1:{sentinel_of.port}/nosuch",
                     sentinel_password=None)
    with pytest.raises(redlockc.ConnectionError) as e:
        client.lock("py-sentinel").acquire(blocking=False)
    assert "knows no master named 'nosuch'" in str(e.value)


def test_sentinel_options_are_checked(server):
    with pytest.raises(redlockc.InvalidArgument) as e:
        redlockc.Client(server.uri, sentinel_password="S3ntPw")
    assert "no node is redis-sentinel://" in str(e.value) and "S3ntPw" not in str(e.value)
