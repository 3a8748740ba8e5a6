"""redlockc.asyncio over rediss://: the driver's TLS (ssl.SSLContext) against a
real redis-server with --tls-port, certificates made for the run by
tests/tls/make_certs.sh (OpenSSL). The server keeps a plain port too, to look
at the lock as anyone would. Every wait is bounded; nothing asserts on speed.
"""
import asyncio
import ssl

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio

pytestmark = pytest.mark.asyncio

from tls_fixtures import PASSWORD  # certs, tls_server, mtls_server: conftest.py


async def round_trip(uri, **options):
    """Acquire over TLS, a second client kept out, release: the lock worked."""
    a, b = aio.Client(uri, fencing=True, **options), aio.Client(uri, **options)
    try:
        la, lb = a.lock("tls:orders"), b.lock("tls:orders")
        assert await asyncio.wait_for(la.acquire(timeout=5), 10)
        assert la.fencing_token >= 1
        assert not await asyncio.wait_for(lb.acquire(blocking=False), 10), \
            "a second client got a held lock"
        await la.release()
        assert await asyncio.wait_for(lb.acquire(blocking=False), 10)
        await lb.release()
    finally:
        await a.close()
        await b.close()


async def failure(uri, **options):
    """The error of an acquire that cannot connect, within a bound (no hang)."""
    async with aio.Client(uri, **options) as c:
        with pytest.raises(redlockc.Error) as info:
            await asyncio.wait_for(c.lock("tls:fail").acquire(timeout=1), 15)
    msg = str(info.value)
    assert PASSWORD not in msg
    return info.value, msg


async def test_acquire_and_release_over_rediss_with_verification(tls_server, certs):
    await round_trip(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt")
    await round_trip(tls_server.tls_uri("localhost"), tls_ca_file=f"{certs}/ca.crt")
    # The field is Redisson's, as over plain TCP.
    async with aio.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt") as c:
        lock = c.lock("tls:seen")
        async with lock:
            raw = tls_server.raw()
            assert raw.hget("tls:seen", f"{c.uuid}:{lock.owner_id}") == b"1"


async def test_an_ssl_context_of_the_callers_own(tls_server, certs):
    ctx = ssl.create_default_context(cafile=f"{certs}/ca.crt")
    await round_trip(tls_server.tls_uri(), ssl_context=ctx)
    with pytest.raises(redlockc.InvalidArgument, match="either ssl_context or tls_ca_file"):
        aio.Client(tls_server.tls_uri(), ssl_context=ctx, tls_ca_file=f"{certs}/ca.crt")
    with pytest.raises(redlockc.InvalidArgument, match="no node is rediss://"):
        aio.Client(f"redis://127.0.0.1:{tls_server.port}", ssl_context=ctx)


async def test_a_certificate_from_another_ca_fails_the_handshake_clearly(tls_server, certs):
    err, msg = await failure(tls_server.tls_uri(), tls_ca_file=f"{certs}/other-ca.crt")
    assert isinstance(err, (redlockc.ConnectionError, redlockc.TimeoutError)), repr(err)
    assert f"127.0.0.1:{tls_server.tls_port}: TLS handshake failed: " in msg, msg
    assert "certificate" in msg, msg


async def test_tls_verify_false_connects_whatever_the_certificate(tls_server, certs):
    await round_trip(tls_server.tls_uri(), tls_ca_file=f"{certs}/other-ca.crt", tls_verify=False)


async def test_a_server_name_the_certificate_lacks_fails_verification(tls_server, certs):
    _, msg = await failure(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt",
                           tls_server_name="wrong.example")
    assert "TLS handshake failed: " in msg and "wrong.example" in msg, msg
    await round_trip(tls_server.tls_uri(), tls_ca_file=f"{certs}/ca.crt",
                     tls_server_name="localhost")


async def test_a_required_client_certificate(mtls_server, certs):
    uri = mtls_server.tls_uri()
    await round_trip(uri, tls_ca_file=f"{certs}/ca.crt", tls_cert_file=f"{certs}/client.crt",
                     tls_key_file=f"{certs}/client.key")
    await round_trip(uri, tls_ca_file=f"{certs}/ca.crt", tls_cert_file=f"{certs}/client.pem")
    _, msg = await failure(uri, tls_ca_file=f"{certs}/ca.crt")
    assert "TLS " in msg and "client certificate" in msg, msg


async def test_bad_tls_settings_are_refused_when_the_client_is_made(tls_server, certs):
    with pytest.raises(redlockc.InvalidArgument, match="option tls_ca_file"):
        aio.Client(tls_server.tls_uri(), tls_ca_file=f"{certs}/missing.crt")
    with pytest.raises(redlockc.InvalidArgument, match="tls_key_file needs tls_cert_file"):
        aio.Client(tls_server.tls_uri(), tls_key_file=f"{certs}/client.key")
    with pytest.raises(redlockc.InvalidArgument, match="no node is rediss://"):
        aio.Client(f"redis://:{PASSWORD}@127.0.0.1:{tls_server.port}",
                   tls_ca_file=f"{certs}/ca.crt")
    with pytest.raises(TypeError, match="tls_verify"):
        aio.Client(tls_server.tls_uri(), tls_verify="yes")
