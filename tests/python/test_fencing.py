"""Fencing end to end: a holder whose lease ran out while it was paused has a
smaller token than the next holder, and both resources, Redis
(Client.fenced_set) and PostgreSQL (redlockc.fencing), refuse its late write."""
import psycopg2
import psycopg2.errors
import pytest

import redlockc
from pg_server import PgServer
from redis_servers import wait_until
from redlockc import fencing


@pytest.fixture(scope="module")
def postgres():
    pg = PgServer().start()
    yield pg
    pg.stop()


@pytest.fixture
def pg_conn(postgres):
    conn = psycopg2.connect(postgres.dsn())
    with conn, conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS accounts, redlockc_fences")
        cur.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text, fence bigint)")
        cur.execute("INSERT INTO accounts VALUES (1, 'nobody', 0)")
        fencing.ensure_table(conn)
    yield conn
    conn.close()


def balance_owner(conn):
    with conn.cursor() as cur:
        cur.execute("SELECT owner FROM accounts WHERE id = 1")
        return cur.fetchone()[0]


def test_paused_holder_is_refused_by_redis_and_postgres(servers3, server, clients, pg_conn):
    a, b, c = servers3
    for s, v in ((a, 10), (b, 1), (c, 1)):
        s.raw().set("redisson_lock_token:{acct}", v)
    nodes = [s.uri for s in servers3]
    holder1 = clients(nodes, node_timeout=2, fencing=True).lock("acct")
    assert holder1.acquire(blocking=False, lease=1.5)
    t1 = holder1.fencing_token
    assert t1 == 11
    stored = [int(s.raw().get("redisson_lock_token:{acct}")) for s in servers3]
    assert sum(v >= t1 for v in stored) >= 2, f"a quorum stores {t1}: {stored}"

    # Holder 1 "pauses": it does nothing while its lease runs out; A dies.
    a.kill()
    assert wait_until(lambda: not b.raw().exists("acct") and not c.raw().exists("acct"),
                      timeout=10)
    holder2 = clients(nodes, node_timeout=0.2, fencing=True).lock("acct")
    assert holder2.acquire(blocking=False, lease=30)
    t2 = holder2.fencing_token
    assert t2 > t1

    store = clients(server.uri)
    assert store.fenced_set("acct:owner", "holder 2", t2) is True
    with pg_conn:
        assert fencing.pg_fenced_update(pg_conn, "acct", t2,
                                        "UPDATE accounts SET owner = %s WHERE id = 1",
                                        ("holder 2",))
    # Recipe 1: the fence column on the row itself.
    with pg_conn, pg_conn.cursor() as cur:
        cur.execute("UPDATE accounts SET owner = %s, fence = %s WHERE id = 1 AND fence <= %s",
                    ("holder 2", t2, t2))
        assert cur.rowcount == 1

    # Holder 1 wakes up and writes with its old token: refused everywhere.
    assert store.fenced_set("acct:owner", "holder 1", t1) is False
    assert server.raw().get("acct:owner") == b"holder 2"
    with pg_conn:
        assert not fencing.pg_fenced_update(pg_conn, "acct", t1,
                                            "UPDATE accounts SET owner = %s WHERE id = 1",
                                            ("holder 1",))
    with pg_conn, pg_conn.cursor() as cur:
        cur.execute("UPDATE accounts SET owner = %s, fence = %s WHERE id = 1 AND fence <= %s",
                    ("holder 1", t1, t1))
        assert cur.rowcount == 0
    assert balance_owner(pg_conn) == "holder 2"
    holder2.release()


def test_pg_fenced_update_serializes_writers_of_one_resource(postgres, pg_conn):
    """The newer token commits first while the older writer waits on the row
    lock; the older one then sees the newer token and is refused."""
    other = psycopg2.connect(postgres.dsn())
    try:
        assert fencing.pg_fenced_update(other, "acct", 7,
                                        "UPDATE accounts SET owner = 'seven' WHERE id = 1")
        # `other` holds the fence row's lock until it commits.
        with pg_conn.cursor() as cur:
            cur.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg2.errors.LockNotAvailable):
            fencing.pg_fenced_update(pg_conn, "acct", 5, "SELECT 1")
        pg_conn.rollback()
        other.commit()
        assert not fencing.pg_fenced_update(pg_conn, "acct", 5,
                                            "UPDATE accounts SET owner = 'five' WHERE id = 1")
        assert fencing.pg_fenced_update(pg_conn, "acct", 7, "SELECT 1"), "equal tokens pass"
        pg_conn.commit()
        assert balance_owner(pg_conn) == "seven"
    finally:
        other.close()


def test_fenced_set_arguments(server, clients, servers3):
    store = clients(server.uri)
    assert store.fenced_set("k", b"\x00bytes", 3) is True
    assert server.raw().get("k") == b"\x00bytes"
    assert store.fenced_set("k", "str", 3) is True
    assert store.fenced_set("k", bytearray(b"ba"), 2) is False
    assert server.raw().get("redlockc_fence:{k}") == b"3"
    with pytest.raises(redlockc.InvalidArgument):
        store.fenced_set("k", "v", 0)
    with pytest.raises(TypeError):
        store.fenced_set("k", 5, 1)
    with pytest.raises(redlockc.InvalidArgument):
        clients([s.uri for s in servers3]).fenced_set("k", "v", 1)
    store.close()
    with pytest.raises(redlockc.ClosedError):
        store.fenced_set("k", "v", 4)
