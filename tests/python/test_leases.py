"""Leases: the watchdog, fixed leases, extend(), and the time queries (seconds)."""
import math
import time

import pytest

import redlockc
from redis_servers import wait_until


def test_watchdog_keeps_a_one_second_lease_alive_for_three_seconds(server, clients, raw):
    lock = clients(server.uri, watchdog_timeout=1).lock("wd")
    lock.acquire()
    lowest = 1000
    end = time.monotonic() + 3
    for _ in range(1000):  # about 60 samples, 50 ms apart
        if time.monotonic() >= end:
            break
        pttl = raw.pttl("wd")
        assert pttl > 0, f"PTTL {pttl}: the lock expired under the watchdog"
        lowest = min(lowest, pttl)
        time.sleep(0.05)
    assert lowest > 200, f"renewed every third of the lease: lowest PTTL {lowest} ms"
    assert lock.owned(), "still owned after 3 s"
    assert 0 < lock.validity <= 1, f"validity {lock.validity} s, expected within the 1 s lease"
    lock.release()


def test_fixed_lease_expires_and_release_raises_lock_lost(server, clients, raw):
    la, lb = clients(server.uri).lock("lease"), clients(server.uri).lock("lease")
    t0 = time.monotonic()
    assert la.acquire(lease=0.3), "a takes the free lock, 0.3 s lease"
    assert 0 < raw.pttl("lease") <= 300, "PTTL is the 0.3 s lease"
    assert wait_until(lambda: raw.exists("lease") == 0, timeout=3), "the key expired"
    assert time.monotonic() - t0 >= 0.25, "it did not expire early"
    assert lb.acquire(blocking=False), "b takes it after the lease ended"
    with pytest.raises(redlockc.LockLostError) as e:
        la.release()
    assert e.value.code == -6 and "'lease'" in str(e.value), f"names the lock: {e.value}"
    assert lb.owned(), "b's lock survived a's late release"
    lb.release()


def test_extend_sets_a_new_fixed_lease_or_returns_to_the_watchdog(client, raw):
    lock = client.lock("ext")
    lock.acquire(lease=0.5)
    lock.extend(5)
    assert 4000 < raw.pttl("ext") <= 5000, "PTTL after extend(5)"
    assert 4 < lock.validity <= 5, f"validity {lock.validity} s after extend(5)"
    lock.extend(None)
    assert raw.pttl("ext") > 29000, "extend(None): the watchdog's 30 s lease"
    lock.release()
    with pytest.raises(redlockc.NotOwnerError):
        lock.extend(1)
    lock.acquire(lease=0.2)
    assert wait_until(lambda: raw.exists("ext") == 0, timeout=2), "expired"
    with pytest.raises(redlockc.LockLostError):
        lock.extend(1)


def test_validity_and_ttl_are_seconds(client):
    lock = client.lock("v")
    assert lock.validity == 0.0, "not held: validity 0"
    assert lock.ttl is None, "no such lock: ttl None"
    lock.acquire(lease=10)
    # lease - elapsed - (1% of the lease + 2 ms)
    assert 9.7 < lock.validity <= 9.898, f"validity {lock.validity}"
    assert isinstance(lock.ttl, float) and 9 < lock.ttl <= 10, f"ttl {lock.ttl}"
    lock.release()


def test_ttl_of_a_lock_without_expiry_is_infinite(client, raw):
    raw.hset("forever", "someone:1", 1)
    assert client.lock("forever").ttl == math.inf, "PTTL -1 is math.inf"


def test_fencing_token_grows_with_each_new_holder(server, clients):
    la = clients(server.uri, fencing=True).lock("fence")
    lb = clients(server.uri, fencing=True).lock("fence")
    with pytest.raises(redlockc.NotOwnerError):
        la.fencing_token
    la.acquire()
    t1 = la.fencing_token
    la.acquire()
    assert la.fencing_token == t1, "a nested acquire keeps the token"
    la.release()
    la.release()
    lb.acquire()
    assert isinstance(lb.fencing_token, int) and lb.fencing_token > t1, \
        f"next holder's token {lb.fencing_token} > {t1}"
    lb.release()


def test_nested_acquire_keeps_the_first_mode_and_lease(client, raw):
    lock = client.lock("nested")
    lock.acquire(lease=20)
    lock.acquire()  # watchdog asked, but the first hold's fixed lease stays
    assert 19000 < raw.pttl("nested") <= 20000, "the nested acquire refreshed the 20 s lease"
    assert lock.hold_count == 2, f"hold_count {lock.hold_count} after two acquires"
    lock.release()
    lock.release()
