"""redlockc over rediss://: the library's TLS (OpenSSL) against a real
redis-server with --tls-port, certificates made for the run by
tests/tls/make_certs.sh. The server keeps its plain port, where redis-cli
looks at the lock."""
import os
import subprocess

import pytest

from clitools import TOP, Redis, free_port, run, status_and_watch_follow_a_holder

USAGE, UNAVAILABLE = 64, 69
PASSWORD = "tls-Pa55-not-for-logs"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", os.path.join(TOP, "tests", "tls", "make_certs.sh"), str(d)],
                   check=True)
    return str(d)


@pytest.fixture(scope="module")
def tls_redis(certs):
    # A port taken between free_port() and the bind fails the start: try a few.
    for _ in range(3):
        tls_port = free_port()
        try:
            r = Redis("--requirepass", PASSWORD, "--tls-port", str(tls_port),
                      "--tls-cert-file", f"{certs}/server.crt",
                      "--tls-key-file", f"{certs}/server.key",
                      "--tls-ca-cert-file", f"{certs}/ca.crt", "--tls-auth-clients", "no")
        except RuntimeError:
            continue
        r.tls_uri = f"rediss://:{PASSWORD}@127.0.0.1:{tls_port}"
        yield r
        r.stop()
        return
    pytest.fail("redis-server with --tls-port did not start")


def test_cmd_runs_holding_a_lock_taken_over_tls(cli, tls_redis, certs, name):
    probe = f"redis-cli -p {tls_redis.port} --no-auth-warning -a {PASSWORD} exists {name}"
    r = run(cli, tls_redis.tls_uri, "--options", f"tls_ca_file={certs}/ca.crt", "-w", "5s",
            name, "--", "sh", "-c", probe)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1", "the lock was not held while CMD ran"
    assert tls_redis.cli("EXISTS", name, password=PASSWORD) == "0", "released after CMD"
    assert PASSWORD not in r.stderr


def test_status_and_watch_over_tls_show_the_lock_as_the_library_sees_it(cli, tls_redis, certs,
                                                                        name):
    status_and_watch_follow_a_holder(cli, tls_redis.tls_uri, name, "--options",
                                     f"tls_ca_file={certs}/ca.crt")


def test_a_failed_verification_is_unavailable_with_the_reason(cli, tls_redis, certs, name):
    r = run(cli, tls_redis.tls_uri, "--options", f"tls_ca_file={certs}/other-ca.crt",
            "-w", "0", name, "--", "true")
    assert r.returncode == UNAVAILABLE, r.stderr
    assert "TLS handshake with 127.0.0.1:" in r.stderr and "certificate verify failed" in r.stderr
    assert PASSWORD not in r.stderr


def test_bad_tls_options_are_usage_errors(cli, tls_redis, certs, name):
    r = run(cli, tls_redis.tls_uri, "--options", f"tls_ca_file={certs}/missing.crt", name,
            "--", "true")
    assert r.returncode == USAGE and "option tls_ca_file" in r.stderr, r.stderr
    r = run(cli, tls_redis.uri, "--options", f"tls_ca_file={certs}/ca.crt", name, "--", "true")
    assert r.returncode == USAGE and "no node is rediss://" in r.stderr, r.stderr
