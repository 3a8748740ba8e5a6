"""Redlock over 3 independent redis-server processes (quorum 2)."""
import pytest

import redlockc


def uris(servers):
    return [s.uri for s in servers]


def test_a_lock_is_the_same_hold_on_every_node(servers3, clients):
    client = clients(uris(servers3))
    assert client.quorum == 2 and len(client.nodes) == 3, "3 nodes, quorum 2"
    lock = client.lock("rl")
    assert lock.acquire(), "the free lock is taken on the quorum"
    field = f"{client.uuid}:{redlockc.thread_owner()}".encode()
    for s in servers3:
        with s.raw() as r:
            assert r.hgetall("rl") == {field: b"1"}, f"node {s.port}: the same field"
    assert 0 < lock.validity <= 30, f"validity {lock.validity} s"
    lock.release()
    for s in servers3:
        with s.raw() as r:
            assert r.exists("rl") == 0, f"node {s.port}: released"


def test_two_redlock_clients_exclude_each_other(servers3, clients):
    a, b = clients(uris(servers3)).lock("rx"), clients(uris(servers3)).lock("rx")
    assert a.acquire(blocking=False), "a takes the free lock"
    assert b.acquire(blocking=False) is False, "b is refused"
    assert b.locked() and not b.owned(), "b sees it locked, not owned by b"
    a.release()
    assert b.acquire(timeout=1), "b takes it after a released it"
    b.release()


def test_one_node_down_still_has_a_quorum(servers3, clients):
    lock = clients(uris(servers3), node_timeout=0.05, connect_timeout=0.1).lock("q")
    servers3[0].kill()
    assert lock.acquire(blocking=False), "2 of 3 nodes are a quorum"
    assert lock.owned(), "owned on 2 of 3 nodes"
    lock.release()


def test_two_nodes_down_raise_no_quorum(servers3, clients):
    lock = clients(uris(servers3), node_timeout=0.05, connect_timeout=0.1).lock("nq")
    servers3[0].kill()
    servers3[1].kill()
    with pytest.raises(redlockc.NoQuorumError) as e:
        lock.acquire(blocking=False)
    assert e.value.code == -7 and str(e.value), f"message: {e.value}"
    with servers3[2].raw() as r:
        assert r.exists("nq") == 0, "a failed Redlock acquire is undone on the node that said yes"
