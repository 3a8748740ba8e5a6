"""redlockc NAME -- CMD: CMD runs while the lock is held, its exit status is
passed on, and each of the tool's own outcomes has its own exit code."""
import os
import signal
import subprocess
import time

import pytest

from clitools import finish, free_port, hold_raw, is_waiting, run, start, wait_until

USAGE, UNAVAILABLE, BUSY, NOEXEC, NOTFOUND = 64, 69, 75, 126, 127


def expect_status(r, status, what):
    assert r.returncode == status, (
        f"{what}: expected exit {status}, seen {r.returncode}\n"
        f"stdout: {r.stdout}\nstderr: {r.stderr}")


@pytest.mark.parametrize("status", [0, 1, 3, 42, 255])
def test_cmd_exit_status_is_passed_on(cli, redis, name, status):
    r = run(cli, redis.uri, name, "--", "sh", "-c", f"exit {status}")
    expect_status(r, status, f"CMD exited {status}")
    assert redis.cli("EXISTS", name) == "0", "the lock is released after CMD"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1])
def test_cmd_killed_by_a_signal_gives_128_plus_n(cli, redis, name, sig):
    r = run(cli, redis.uri, name, "--", "sh", "-c", f"kill -{int(sig)} $$")
    expect_status(r, 128 + sig, f"CMD killed by signal {int(sig)}")
    assert redis.cli("EXISTS", name) == "0", "the lock is released after CMD"


def test_cmd_runs_holding_the_lock_and_gets_name_and_fencing_token(cli, redis, name):
    probe = (f"redis-cli -p {redis.port} exists {name}; redis-cli -p {redis.port} pttl {name};"
             ' echo "$REDLOCKC_LOCK $REDLOCKC_FENCING_TOKEN"')
    first = run(cli, redis.uri, "--options", "fencing=1", name, "--", "sh", "-c", probe)
    expect_status(first, 0, "probe CMD")
    exists, pttl, env = first.stdout.strip().split("\n")
    assert exists == "1", f"while CMD runs the key exists: expected 1, seen {exists}"
    assert 0 < int(pttl) <= 30000, f"watchdog lease PTTL: expected (0, 30000], seen {pttl}"
    lock, token = env.split()
    assert lock == name, f"REDLOCKC_LOCK: expected {name}, seen {lock}"
    second = run(cli, redis.uri, "--options", "fencing=1", name, "--", "sh", "-c",
                 'echo "$REDLOCKC_FENCING_TOKEN"')
    assert int(second.stdout) == int(token) + 1, (
        f"the next holder's fencing token: expected {int(token) + 1}, seen {second.stdout!r}")
    assert redis.cli("EXISTS", name, f"redisson_lock_token:{{{name}}}") == "1", \
        "with fencing=1 the counter is the one key left of the lock"


def test_without_fencing_cmd_gets_no_token_and_no_key_is_left(cli, make_redis, name):
    redis = make_redis()
    r = run(cli, redis.uri, name, "--", "sh", "-c", 'echo "${REDLOCKC_FENCING_TOKEN-unset}"')
    expect_status(r, 0, "CMD without fencing")
    assert r.stdout.strip() == "unset", f"REDLOCKC_FENCING_TOKEN without fencing: {r.stdout!r}"
    r = run(cli, redis.uri, name, "--", "sh", "-c", 'echo "${REDLOCKC_FENCING_TOKEN-unset}"',
            env={**os.environ, "REDLOCKC_FENCING_TOKEN": "42"})
    assert r.stdout.strip() == "unset", "an inherited token (another hold's) is not passed on"
    assert redis.cli("DBSIZE") == "0", f"keys left: {redis.cli('KEYS', '*')}"


def test_busy_lock_with_wait_0_exits_75_and_cmd_does_not_run(cli, redis, name, tmp_path):
    hold_raw(redis, name)
    before = redis.cli("HGETALL", name)
    marker = tmp_path / "ran"
    r = run(cli, redis.uri, "--wait", "0", name, "--", "touch", str(marker))
    expect_status(r, BUSY, "busy lock, --wait 0")
    assert "busy" in r.stderr, f"stderr says busy: {r.stderr!r}"
    assert not marker.exists(), "CMD must not run without the lock"
    assert redis.cli("HGETALL", name) == before, "the other owner's hold is untouched"


def test_busy_lock_exits_75_once_the_wait_ran_out(cli, redis, name):
    hold_raw(redis, name)
    t0 = time.monotonic()
    r = run(cli, redis.uri, "--wait", "0.6", name, "--", "true")
    waited = time.monotonic() - t0
    expect_status(r, BUSY, "busy lock, --wait 0.6")
    assert waited >= 0.6, f"it waits at least --wait: expected >= 0.6 s, seen {waited:.3f} s"


def test_a_waiter_runs_cmd_after_the_holder_released(cli, redis, name, tmp_path):
    log, go = tmp_path / "log", tmp_path / "go"
    # The holder works until the test says go (bounded: 10 s).
    holder = start(cli, redis.uri, name, "--", "sh", "-c",
                   f"i=0; while [ ! -e {go} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done;"
                   f" echo holder >> {log}")
    wait_until(lambda: redis.cli("EXISTS", name) == "1", what="the holder to hold the lock")
    waiter = start(cli, redis.uri, "--wait", "20", name, "--", "sh", "-c", f"echo waiter >> {log}")
    wait_until(lambda: is_waiting(redis, name), what="the waiter to subscribe")
    go.touch()
    assert finish(holder)[0] == 0, "holder exit"
    status, _, err = finish(waiter)
    assert status == 0, f"waiter: expected exit 0, seen {status}; stderr: {err}"
    assert log.read_text() == "holder\nwaiter\n", f"order of work: seen {log.read_text()!r}"


def test_no_redis_exits_69_and_cmd_does_not_run(cli, name, tmp_path):
    marker = tmp_path / "ran"
    port = free_port()
    r = run(cli, f"redis://127.0.0.1:{port}", "--wait", "0", name, "--", "touch", str(marker))
    expect_status(r, UNAVAILABLE, "nothing listens on the port")
    # each fact once: the failure with its address and reason, and the lock
    assert r.stderr.count(f"cannot connect to 127.0.0.1:{port}: Connection refused") == 1 and \
        r.stderr.count(f"127.0.0.1:{port}") == 1 and r.stderr.count(f"'{name}'") == 1, r.stderr
    assert not marker.exists(), "CMD must not run without the lock"


def test_redlock_without_a_quorum_exits_69_and_with_one_runs(cli, redis, make_redis, name):
    dead = [f"redis://127.0.0.1:{free_port()}" for _ in range(2)]
    r = run(cli, ",".join([redis.uri] + dead), "--wait", "0", name, "--", "true")
    expect_status(r, UNAVAILABLE, "1 of 3 nodes up")
    other = make_redis()
    probe = f"redis-cli -p {redis.port} exists {name}; redis-cli -p {other.port} exists {name}"
    r = run(cli, ",".join([redis.uri, other.uri, dead[0]]), "--wait", "0", name, "--",
            "sh", "-c", probe)
    expect_status(r, 0, "2 of 3 nodes up")
    assert r.stdout.split() == ["1", "1"], f"held on both live nodes: seen {r.stdout!r}"


@pytest.mark.parametrize("argv", [
    [],
    ["only-a-name"],
    ["name", "--"],
    ["--bogus", "name", "--", "true"],
    ["--wait", "soon", "name", "--", "true"],
    ["--wait"],
    ["--lease", "0", "name", "--", "true"],
    ["--kill-after", "-1", "name", "--", "true"],
    ["--options", "no_such_option=1", "name", "--", "true"],
    ["--nodes", "http://127.0.0.1:1", "name", "--", "true"],
    ["--force", "name", "--", "true"],
    ["release", "name"],
    ["status"],
    ["status", "a", "b"],
])
def test_usage_errors_exit_64(cli, redis, argv):
    env = dict(os.environ, REDLOCKC_NODES=redis.uri)
    r = subprocess.run([cli] + argv, capture_output=True, text=True, timeout=10, env=env)
    expect_status(r, USAGE, f"redlockc {' '.join(argv)}")
    assert r.stderr.startswith("redlockc: "), f"a message on stderr: {r.stderr!r}"


def test_a_password_is_never_printed(cli, make_redis, name):
    secure = make_redis("--requirepass", "right-pw")
    host = f"127.0.0.1:{secure.port}"
    cases = [
        (UNAVAILABLE, f"redis://:wrong-pw@{host}", [name, "--", "true"]),
        (UNAVAILABLE, f"redis://:wrong-pw@{host}", ["status", name]),
        (USAGE, f"redis://user:wrong-pw@{host}/notadb", [name, "--", "true"]),
        (USAGE, f"redis://user:wrong-pw@127.0.0.1:99999", [name, "--", "true"]),
    ]
    for status, nodes, args in cases:
        r = run(cli, nodes, "--wait", "0", *args)
        expect_status(r, status, f"{nodes} {args}")
        assert "wrong-pw" not in r.stdout + r.stderr, f"password printed: {r.stderr!r}"
    r = run(cli, f"redis://:right-pw@{host}", name, "--", "true")
    expect_status(r, 0, "the right password")


def test_cmd_not_found_exits_127_and_releases(cli, redis, name):
    r = run(cli, redis.uri, name, "--", "/nonexistent/cmd")
    expect_status(r, NOTFOUND, "CMD does not exist")
    assert redis.cli("EXISTS", name) == "0", "the lock is released"


def test_cmd_not_executable_exits_126_and_releases(cli, redis, name, tmp_path):
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    r = run(cli, redis.uri, name, "--", str(script))
    expect_status(r, NOEXEC, "CMD is not executable")
    assert redis.cli("EXISTS", name) == "0", "the lock is released"


def test_a_lock_called_status_runs_cmd_after_double_dash(cli, redis):
    r = run(cli, redis.uri, "status", "--", "sh", "-c", "exit 5")
    expect_status(r, 5, "'status --' is a lock name, then CMD")


def test_nodes_come_from_redlockc_nodes(cli, redis, name):
    env = dict(os.environ, REDLOCKC_NODES=redis.uri)
    r = subprocess.run([cli, name, "--", "sh", "-c", "exit 4"], capture_output=True, text=True,
                       timeout=30, env=env)
    expect_status(r, 4, "--nodes from $REDLOCKC_NODES")


def test_cmd_inherits_no_descriptor_of_redlockc(cli, redis, name):
    # The library's sockets and the tool's signalfd and pipe are close-on-exec:
    # CMD sees the descriptors it would see when run directly.
    listing = ["sh", "-c", "ls /proc/$$/fd"]
    direct = subprocess.run(listing, capture_output=True, text=True, timeout=10)
    r = run(cli, redis.uri, name, "--", *listing)
    expect_status(r, 0, "CMD lists its descriptors")
    assert sorted(r.stdout.split()) == sorted(direct.stdout.split()), (
        f"descriptors: run directly {direct.stdout.split()}, under redlockc {r.stdout.split()}")
