"""Connections: reconnecting, script reloads, ACL users."""
import pytest

import redlockc


def test_killed_connections_reconnect_on_the_next_call(client, raw):
    lock = client.lock("ck")
    for i in range(5):
        # The call that finds the connection broken may fail (its command may
        # have been sent: it is never retried silently); the next reconnects.
        try:
            got = lock.acquire(blocking=False)
        except redlockc.ConnectionError:
            got = lock.acquire(blocking=False)
        assert got, f"round {i}: acquire after the server closed our connections"
        lock.release()
        killed = raw.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1, "the client's connections were killed"


def test_scripts_reload_after_script_flush_and_server_restart(server, client, raw):
    lock = client.lock("flush")
    lock.acquire()
    lock.release()
    raw.script_flush()
    assert lock.acquire(blocking=False), "acquire after SCRIPT FLUSH (NOSCRIPT -> reload)"
    lock.release()
    assert raw.exists("flush") == 0, "released after the reload"
    server.restart()
    assert lock.acquire(blocking=False), "acquire on the restarted server"
    with server.raw() as fresh:
        assert fresh.exists("flush") == 1, "held on the restarted server"
    lock.release()


def test_acl_user_from_the_uri(start_server, clients):
    s = start_server("--requirepass", "admin-pw")
    with s.raw() as admin:
        admin.acl_setuser("alice", enabled=True, passwords=["+alice-pw"], keys=["*"],
                          channels=["*"], commands=["+@all"])
    lock = clients(f"redis://alice:alice-pw@127.0.0.1:{s.port}").lock("acl")
    assert lock.acquire(), "user alice (ACL) takes the lock"
    lock.release()
    with pytest.raises(redlockc.AuthenticationError):
        clients(f"redis://alice:nope@127.0.0.1:{s.port}").lock("acl").acquire()
