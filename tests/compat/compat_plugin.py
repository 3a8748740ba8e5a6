"""A pytest plugin that runs redis-py's own lock tests on redlockc.compat.

Loaded by run.sh (``-p compat_plugin``) into a pytest run of redis-py's
tests/test_lock.py and tests/test_asyncio/test_lock.py, from the sdist of the
pinned version, whose code is not edited:

- it puts redlockc.compat.Lock where redis-py's Lock is (redis.lock.Lock,
  and the default of Redis.lock()), and AsyncLock where redis.asyncio's is,
  before the test modules import them (`from redis.lock import Lock`);
- it starts a redis-server on a free loopback port (the project's
  tests/python/redis_servers.py) and gives the tests its URL (--redis-url),
  and stops it by its pid at the end;
- it marks each test of expected_failures.txt as a strict xfail with the
  reason written there: a listed test that passes fails the run (the list
  stays true), and so does an entry that names no collected test.
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # redis_servers

import redis.asyncio.client  # noqa: E402
import redis.asyncio.lock  # noqa: E402
import redis.client  # noqa: E402
import redis.lock  # noqa: E402

from redlockc.compat import AsyncLock, Lock  # noqa: E402
from redis_servers import RedisServer  # noqa: E402

# The swap: what `from redis.lock import Lock` and Redis.lock(lock_class=None)
# find from now on.
redis.lock.Lock = redis.client.Lock = Lock
redis.asyncio.lock.Lock = redis.asyncio.client.Lock = AsyncLock

LIST = os.path.join(HERE, "expected_failures.txt")


def read_expected(path=LIST):
    """{test id without parameters: reason} from "<test id>  <reason>" lines."""
    expected = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            test_id, _, reason = line.partition(" ")
            expected[test_id] = reason.strip()
    return expected


_server = None


def pytest_configure(config):
    global _server
    _server = RedisServer().start()
    config.option.redis_url = f"redis://127.0.0.1:{_server.port}/0"
    config.compat_expected = read_expected()
    print(f"compat: redis-py {redis.__version__}, lock classes "
          f"{redis.lock.Lock.__module__}.{redis.lock.Lock.__name__} and "
          f"{redis.asyncio.lock.Lock.__module__}.{redis.asyncio.lock.Lock.__name__}; "
          f"redis-server on {config.option.redis_url}")


def pytest_unconfigure(config):
    if _server is not None:
        _server.stop()


@pytest.hookimpl(tryfirst=True)  # every collected test, before -k deselects any
def pytest_collection_modifyitems(config, items):
    expected = config.compat_expected
    seen = set()
    for item in items:
        test_id = item.nodeid.split("[")[0]
        if test_id in expected:
            seen.add(test_id)
            item.add_marker(pytest.mark.xfail(reason=expected[test_id], strict=True))
    unknown = sorted(set(expected) - seen)
    if unknown:
        raise pytest.UsageError("expected_failures.txt names tests that were not collected "
                                "(renamed upstream?): " + ", ".join(unknown))
