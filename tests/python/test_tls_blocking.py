"""The blocking redlockc.Client over rediss://: the C library's own TLS
(OpenSSL, c/src/blocking/tls.c) against a real redis-server with --tls-port,
certificates made for the run by tests/tls/make_certs.sh. The server keeps a
plain port too, to look at the lock as anyone would. Every wait is bounded;
nothing asserts on speed.
"""
import threading

import pytest

import redlockc
from redis_servers import wait_until

from tls_fixtures import PASSWORD  # certs, tls_server, mtls_server: conftest.py


def test_a_lock_over_rediss_is_the_redisson_hash(tls_server, certs):
    with redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt",
                         fencing=True) as a, \
            redlockc.Client(tls_server.tls_uri("localhost"), tls_ca_file=f"{certs}/ca.crt") as b:
        la, lb = a.lock("tls:orders"), b.lock("tls:orders")
        with la:
            raw = tls_server.raw()
            fields = raw.hgetall("tls:orders")
            assert len(fields) == 1 and list(fields)[0].startswith(a.uuid.encode() + b":"), fields
            assert la.fencing_token >= 1
            assert not lb.acquire(blocking=False), "a second client got the lock over TLS"
        assert raw.exists("tls:orders") == 0
        assert lb.acquire(blocking=False)
        lb.release()


def test_a_waiter_is_woken_by_the_unlock_message_over_tls(tls_server, certs):
    with redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt") as a, \
            redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt") as b:
        la, lb = a.lock("tls:handoff"), b.lock("tls:handoff")
        assert la.acquire(lease=30)  # only the unlock message can hand it over in time
        got = []

        def wait():  # the owner is the thread: it releases what it got
            got.append(lb.acquire(timeout=20))
            if got[0]:
                lb.release()
        t = threading.Thread(target=wait)
        t.start()
        raw = tls_server.raw()
        assert wait_until(lambda: raw.pubsub_numsub("redisson_lock__channel:{tls:handoff}")[0][1]
                          == 1, 10), "the waiter never subscribed over TLS"
        la.release()
        t.join(30)
        assert got == [True]


def test_a_failed_handshake_is_a_connection_error_saying_why(tls_server, certs):
    with redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/other-ca.crt") as c:
        with pytest.raises(redlockc.ConnectionError) as info:
            c.lock("tls:nope").acquire(blocking=False)
    msg = str(info.value)
    assert f"TLS handshake with 127.0.0.1:{tls_server.tls_port} failed: " \
           "certificate verify failed" in msg, msg
    assert PASSWORD not in msg
    with redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt",
                         tls_server_name="wrong.example") as c:
        with pytest.raises(redlockc.ConnectionError, match="hostname mismatch"):
            c.lock("tls:nope").acquire(blocking=False)
    with redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/other-ca.crt",
                         tls_verify=False) as c:
        assert c.lock("tls:any").acquire(blocking=False)
        c.lock("tls:any").release()


def test_a_required_client_certificate(mtls_server, certs):
    with redlockc.Client(mtls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt",
                         tls_cert_file=f"{certs}/client.crt",
                         tls_key_file=f"{certs}/client.key") as c:
        with c.lock("tls:mtls"):
            pass
    with redlockc.Client(mtls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt") as c:
        with pytest.raises(redlockc.ConnectionError, match="certificate required"):
            c.lock("tls:mtls").acquire(blocking=False)


def test_bad_tls_settings_are_refused_when_the_client_is_made(tls_server, certs):
    with pytest.raises(redlockc.InvalidArgument, match="option tls_ca_file: cannot load"):
        redlockc.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/missing.crt")
    with pytest.raises(redlockc.InvalidArgument, match="no node is rediss://"):
        redlockc.Client(f"redis://:{PASSWORD}@127.0.0.1:{tls_server.port}",
                        tls_ca_file=f"{certs}/ca.crt")
