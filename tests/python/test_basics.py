"""Acquire, release, reentrancy and ownership, seen from Python and from redis-py."""
import threading

import pytest

import redlockc


def field(client, owner=None):
    """The hash field a lock of `client` writes for this thread (or `owner`)."""
    return f"{client.uuid}:{owner or redlockc.thread_owner()}".encode()


def in_thread(fn):
    """Runs fn() in a new thread (another owner) and returns what it returned or raised."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed back to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the thread did not finish within 30 s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_acquire_and_release_change_the_redisson_hash(client, raw):
    lock = client.lock("orders")
    assert lock.acquire() is True, "a free lock is acquired"
    assert raw.hgetall("orders") == {field(client): b"1"}, "HGETALL is {<uuid>:<thread>: 1}"
    pttl = raw.pttl("orders")
    assert 29000 < pttl <= 30000, f"watchdog lease PTTL {pttl}, expected ~30000"
    assert lock.locked() and lock.owned(), "locked and owned after acquire"
    assert lock.release() is None, "release() returns None"
    assert raw.exists("orders") == 0, "the key is deleted at count 0"
    assert not lock.locked() and not lock.owned(), "neither locked nor owned after release"


def test_fixed_lease_sets_pttl(client, raw):
    lock = client.lock("leased")
    assert lock.acquire(lease=20), "a free lock is acquired with a fixed lease"
    pttl = raw.pttl("leased")
    assert 19000 < pttl <= 20000, f"PTTL {pttl}, expected ~20000 for lease=20"
    assert 19 < lock.ttl <= 20, f"ttl {lock.ttl} s, expected ~20"
    lock.release()


def test_mutual_exclusion_between_two_clients(server, clients):
    a, b = clients(server.uri), clients(server.uri)
    la, lb = a.lock("m"), b.lock("m")
    assert la.acquire(blocking=False), "a takes the free lock"
    assert lb.acquire(blocking=False) is False, "busy: False, not an exception"
    assert lb.acquire(timeout=0.1) is False, "busy after a bounded wait"
    assert lb.locked() and not lb.owned(), "b sees it locked, not owned by b"
    la.release()
    assert lb.acquire(blocking=False), "b takes it once a released it"
    assert la.acquire(blocking=False) is False, "now a is refused"
    lb.release()


def test_reentrant_count_three_needs_three_releases(server, clients):
    lock, other = clients(server.uri).lock("re"), clients(server.uri).lock("re")
    for _ in range(3):
        assert lock.acquire(blocking=False), "the owner re-enters"
    assert lock.hold_count == 3, f"hold_count {lock.hold_count}, expected 3"
    for i in range(2):
        lock.release()
        assert lock.locked(), f"still locked after release {i + 1} of 3"
        assert other.acquire(blocking=False) is False, "another owner is still refused"
    assert lock.hold_count == 1, f"hold_count {lock.hold_count} after 2 of 3 releases"
    lock.release()
    assert not lock.locked(), "free after the third release"
    assert lock.hold_count == 0, f"hold_count {lock.hold_count} once free"


def test_non_owner_release_raises_and_touches_nothing(server, clients, raw):
    la, lb = clients(server.uri).lock("guarded"), clients(server.uri).lock("guarded")
    la.acquire(lease=60)
    before = raw.hgetall("guarded")
    with pytest.raises(redlockc.NotOwnerError) as e:
        lb.release()
    assert e.value.code == redlockc.NotOwnerError.status == -5, f"code {e.value.code}"
    assert "not held" in str(e.value), f"message: {e.value}"
    with pytest.raises(redlockc.NotOwnerError):
        lb.extend(1)
    assert raw.hgetall("guarded") == before, "the holder's field is unchanged"
    assert raw.pttl("guarded") > 50000, "the lease is untouched"
    la.release()
    with pytest.raises(redlockc.NotOwnerError):
        la.release()


def test_each_thread_is_an_owner_and_explicit_owners_cross_threads(client, raw):
    shared = client.lock("own")
    assert shared.acquire(blocking=False), "this thread takes the free lock"
    assert in_thread(lambda: shared.acquire(blocking=False)) is False, \
        "another thread is another owner of the same Lock object"
    with pytest.raises(redlockc.NotOwnerError):
        in_thread(shared.release)
    shared.release()

    req1, req2, req1b = client.lock("own", owner=1001), client.lock("own", 1002), \
        client.lock("own", owner=1001)
    assert req1.acquire(blocking=False), "explicit owner 1001 takes it"
    assert req2.acquire(blocking=False) is False, "another explicit owner is refused"
    assert req1b.acquire(blocking=False), "the same explicit owner re-enters"
    assert raw.hget("own", field(client, 1001)) == b"2", "field <uuid>:1001 counts 2"
    assert req1.owner == 1001 and shared.owner is None, "owner: the explicit id, or None"
    in_thread(req1.release)  # an explicit owner is the same from any thread
    req1b.release()
    assert raw.exists("own") == 0, "free after both releases"


def test_context_manager_releases_on_exception(client, raw):
    lock = client.lock("ctx")
    with pytest.raises(KeyError):
        with lock as held:
            assert held is lock, "with returns the lock"
            assert raw.exists("ctx") == 1, "held inside the block"
            raise KeyError("boom")
    assert raw.exists("ctx") == 0, "released when the block raised"
    with lock:
        assert lock.owned(), "owned inside the with block"
    assert not lock.locked(), "released after a normal exit"


def test_key_prefix_is_prepended(server, clients, raw):
    lock = clients(server.uri, key_prefix="app1:").lock("jobs")
    lock.acquire()
    assert raw.exists("app1:jobs") == 1 and raw.exists("jobs") == 0, "the key is app1:jobs"
    lock.release()


def test_unix_socket_and_database_from_the_uri(server, clients, raw):
    lock = clients(f"unix://{server.socket}?db=3").lock("viaunix")
    lock.acquire()
    assert raw.exists("viaunix") == 0, "not in database 0"
    db3 = server.raw(db=3)
    assert db3.exists("viaunix") == 1, "the lock is in database 3"
    db3.close()
    lock.release()


def test_repr_names_the_lock_and_hides_passwords(start_server, clients):
    s = start_server("--requirepass", "s3cret")
    c = clients(f"redis://:s3cret@127.0.0.1:{s.port}")
    assert "s3cret" not in repr(c), f"repr leaks the password: {c!r}"
    assert c.uuid in repr(c), f"repr shows the uuid: {c!r}"
    assert repr(c.lock("jobs")) == "<redlockc.Lock 'jobs' owner=thread>", repr(c.lock("jobs"))
    assert repr(c.lock("jobs", owner=7)) == "<redlockc.Lock 'jobs' owner=7>", repr(c.lock("jobs", 7))
    assert c.lock("jobs").client is c and c.lock("jobs").name == "jobs", "client and name"
