"""The client option fencing: off by default, a released lock leaves no key on
the server and fencing_token refuses; on, each hold takes a token from the
counter redisson_lock_token:{name}, the one key per name that stays."""
import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient

NAMES = ("orders", "accounts", "jobs:7")


def assert_fencing_off(error):
    assert error.value.code == redlockc.InvalidArgument.status
    assert "fencing is off" in str(error.value) and "fencing=1" in str(error.value), \
        f"the message names the option: {error.value}"


def test_by_default_no_key_is_left_and_there_is_no_token(client, raw):
    for name in NAMES:
        lock = client.lock(name)
        assert lock.acquire(timeout=5)
        with pytest.raises(redlockc.InvalidArgument) as error:
            lock.fencing_token
        assert_fencing_off(error)
        assert name in str(error.value), "the message names the lock"
        lock.release()
    assert raw.dbsize() == 0, f"keys left after release: {raw.keys('*')}"


def test_with_fencing_one_counter_key_per_name_stays(server, clients, raw):
    client = clients(server.uri, fencing=True)
    for name in NAMES:
        with client.lock(name) as lock:
            assert lock.fencing_token > 0
    assert sorted(raw.keys("*")) == sorted(f"redisson_lock_token:{{{n}}}".encode()
                                           for n in NAMES)


def test_fencing_takes_true_false_or_one_zero_only(server):
    with pytest.raises(TypeError):
        redlockc.Client(server.uri, fencing="yes")
    with pytest.raises(TypeError):
        redlockc.Client(server.uri, fencing=2)


@pytest.mark.asyncio
async def test_asyncio_by_default_no_key_is_left_and_there_is_no_token(server, raw):
    async with aclient(server.uri) as c:
        for name in NAMES:
            lock = c.lock(name)
            assert await lock.acquire(timeout=5)
            with pytest.raises(aio.InvalidArgument) as error:
                lock.fencing_token
            assert_fencing_off(error)
            assert name in str(error.value), "the message names the lock"
            await lock.release()
    assert raw.dbsize() == 0, f"keys left after release: {raw.keys('*')}"


@pytest.mark.asyncio
async def test_asyncio_with_fencing_one_counter_key_per_name_stays(server, raw):
    async with aclient(server.uri, fencing=True) as c:
        for name in NAMES:
            async with c.lock(name) as lock:
                assert lock.fencing_token > 0
    assert sorted(raw.keys("*")) == sorted(f"redisson_lock_token:{{{n}}}".encode()
                                           for n in NAMES)
