"""Fixtures: real redis-server processes, and clients of them.

`server` is a fresh redis-server per test (a test may kill, pause or restart
it); `servers3` three of them for Redlock. Each is stopped by pid at the
end of its test, whatever the test did.
"""
import gc
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # redis_servers, workers

import redlockc  # noqa: E402  (from PYTHONPATH: the build tree, see run.sh)
from redis_servers import RedisServer  # noqa: E402
# The TLS modules' fixtures (certificates, TLS servers), one set per module.
from tls_fixtures import certs, mtls_server, tls_server  # noqa: E402,F401


@pytest.fixture
def server():
    s = RedisServer().start()
    yield s
    s.stop()


@pytest.fixture
def servers3():
    started = []
    try:
        for _ in range(3):
            started.append(RedisServer().start())
        yield started
    finally:
        for s in started:
            s.stop()


@pytest.fixture
def start_server():
    """start_server(*redis_args) -> a started RedisServer, stopped after the test."""
    started = []

    def start(*args):
        s = RedisServer(*args).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def clients():
    """make(nodes, **options) -> a redlockc.Client, closed after the test."""
    made = []

    def make(nodes, **options):
        c = redlockc.Client(nodes, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
    gc.collect()  # lock handles of closed clients are freed here, in the test


@pytest.fixture
def client(server, clients):
    """A client of `server` with the library's defaults."""
    return clients(server.uri)


@pytest.fixture
def raw(server):
    """redis-py on `server`: how any other client sees it."""
    r = server.raw()
    yield r
    r.close()
