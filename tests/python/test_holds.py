"""A hold belongs to its (name, owner) in the client, and `with` takes a timeout and a lease."""
import gc
import time

import pytest

import redlockc
from redis_servers import wait_until


def test_with_client_lock_takes_a_timeout_and_raises_when_busy(client, clients, server, raw):
    other = clients(server.uri).lock("busy", owner=7)
    assert other.acquire(blocking=False), "another client holds it"
    started = time.monotonic()
    with pytest.raises(redlockc.NotAcquiredError, match="busy"):
        with client.lock("busy", timeout=0.2):
            pytest.fail("the block must not run while another client holds the lock")
    waited = time.monotonic() - started
    assert 0.15 < waited < 2, f"waited {waited:.2f} s for a timeout of 0.2 s"
    assert client.held() == [], f"nothing is counted as held: {client.held()}"
    other.release()
    with client.lock("busy", timeout=1, lease=5) as lock:
        ttl = raw.pttl("busy")
        assert 3000 < ttl <= 5000, f"the fixed lease of 5 s is on the key: pttl {ttl}"
        assert lock.hold_count == 1, "one level inside the block"
    assert raw.exists("busy") == 0, "released when the block ended"


def test_lock_called_with_a_timeout_is_a_context_manager(client, raw):
    lock = client.lock("scoped")
    with lock(timeout=1) as held:
        assert held is lock, "`as` gives the Lock"
        with lock(timeout=0, lease=3):
            assert lock.hold_count == 2, "reentrant: two levels"
        assert lock.hold_count == 1, "the inner block released its level"
    assert raw.exists("scoped") == 0, "free after both blocks"
    with pytest.raises(redlockc.InvalidArgument):
        lock(timeout=-5)


def test_with_acquire_is_refused_before_anything_is_taken(client, raw):
    lock = client.lock("misused")
    with pytest.raises(TypeError, match=r"with lock\(timeout=1\)"):
        with lock.acquire(timeout=1):
            pytest.fail("the block must not run")
    assert raw.exists("misused") == 0, "no level was taken (nobody could release it)"
    assert lock.acquire(timeout=1) is True, "a plain acquire still returns True"
    lock.release()


def test_a_hold_taken_through_one_object_is_released_through_another(client, raw):
    client.lock("shared", owner=42).acquire()
    assert raw.hexists("shared", f"{client.uuid}:42"), "held by owner 42"
    client.lock("shared", owner=42).release()
    assert raw.exists("shared") == 0, "released through a second Lock object of the same owner"
    # The thread owner too (Redisson users write client.getLock(name) each time).
    client.lock("mine").acquire()
    client.lock("mine").release()
    assert raw.exists("mine") == 0, "thread owner: released through another object"
    with pytest.raises(redlockc.NotOwnerError):
        client.lock("shared", owner=43).release()


def test_a_collected_lock_object_does_not_drop_a_renewed_hold(server, clients, raw):
    client = clients(server.uri, watchdog_timeout=0.6)
    client.lock("kept", owner=5).acquire()
    gc.collect()
    assert client.held() == [("kept", 5)], f"the client knows the hold: {client.held()}"
    time.sleep(1.5)  # more than two leases: only renewals keep the key
    assert raw.hexists("kept", f"{client.uuid}:5"), "still renewed after its Lock object went"
    assert 0 < raw.pttl("kept") <= 600, "with the watchdog's lease"
    client.lock("kept", owner=5).release()
    assert raw.exists("kept") == 0, "released later through a new object"
    assert client.held() == [], "and forgotten"


def test_nodes_and_repr_never_show_a_password():
    with redlockc.Client(["redis://user:s3cret@127.0.0.1:1", "redis://:hunter2@127.0.0.1:2",
                          "redis://127.0.0.1:3"]) as client:
        shown = repr(client) + " ".join(client.nodes)
        assert "s3cret" not in shown and "hunter2" not in shown, shown
        assert client.nodes[0] == "redis://user:***@127.0.0.1:1", client.nodes
        assert client.nodes[2] == "redis://127.0.0.1:3", "a URI without password is as given"


def test_a_lost_hold_is_logged(server, clients, raw, caplog):
    client = clients(server.uri, watchdog_timeout=0.6)
    client.lock("logged", owner=9).acquire()
    gc.collect()  # no Lock object and no on_lost callback left
    with caplog.at_level("WARNING", logger="redlockc"):
        raw.delete("logged")
        assert wait_until(lambda: any("logged" in r.getMessage() for r in caplog.records),
                          timeout=3), f"no warning on the redlockc logger: {caplog.records}"
