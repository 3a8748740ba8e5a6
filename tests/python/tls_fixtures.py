"""TLS fixtures shared by the TLS test modules (import them by name): the
certificates of tests/tls/make_certs.sh made for the module, and
redis-servers with a TLS port (plain TLS with a password, and mutual TLS)."""
import os
import subprocess

import pytest

from redis_servers import TlsRedisServer

HERE = os.path.dirname(os.path.abspath(__file__))
PASSWORD = "tls-Pa55-not-for-logs"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", os.path.join(HERE, "..", "tls", "make_certs.sh"), str(d)], check=True,
                   capture_output=True)
    return str(d)


@pytest.fixture(scope="module")
def tls_server(certs):
    s = TlsRedisServer(certs, False, "--requirepass", PASSWORD).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_server(certs):
    s = TlsRedisServer(certs, True).start()
    yield s
    s.stop()
