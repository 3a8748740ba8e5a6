"""redlockc --read / --write / --fair / --permits N / --name A --name B: CMD
under a lock of the family, on a real redis-server; what the server holds is
read with redis-cli (Redisson's layout, docs/FAMILY.md)."""
import os
import signal
import time

import pytest

from clitools import finish, run, start, wait_until

USAGE, BUSY, LOST = 64, 75, 79


def expect_status(r, status, what):
    assert r.returncode == status, (
        f"{what}: expected exit {status}, seen {r.returncode}\n"
        f"stdout: {r.stdout}\nstderr: {r.stderr}")


def started_marker(path):
    return lambda: os.path.exists(path)


def test_two_readers_hold_at_once_and_the_mode_is_read(cli, redis, name, tmp_path):
    inside = tmp_path / "inside"
    first = start(cli, redis.uri, "--read", name, "--", "sh", "-c",
                  f"touch {inside}; sleep 30")
    try:
        wait_until(started_marker(inside), what="the first reader's CMD")
        r = run(cli, redis.uri, "--read", "--wait", "0", name, "--", "sh", "-c",
                f"redis-cli -p {redis.port} hget {name} mode")
        expect_status(r, 0, "a second reader beside the first")
        assert r.stdout.strip() == "read", f"mode field: {r.stdout!r}"
        w = run(cli, redis.uri, "--write", "--wait", "0.2", name, "--", "true")
        expect_status(w, BUSY, "a writer while a reader holds it")
    finally:
        first.send_signal(signal.SIGTERM)
        finish(first)
    assert redis.cli("EXISTS", name) == "0", "released after both readers"


def test_a_writer_excludes_readers_and_its_mode_is_write(cli, redis, name, tmp_path):
    inside = tmp_path / "inside"
    writer = start(cli, redis.uri, "--write", name, "--", "sh", "-c",
                   f"redis-cli -p {redis.port} hget {name} mode > {inside}; sleep 30")
    try:
        wait_until(lambda: inside.exists() and inside.read_text().strip(), what="the writer")
        assert inside.read_text().strip() == "write"
        r = run(cli, redis.uri, "--read", "--wait", "0.2", name, "--", "true")
        expect_status(r, BUSY, "a reader while written")
    finally:
        writer.send_signal(signal.SIGTERM)
        status, _, err = finish(writer)
    assert status == 128 + signal.SIGTERM, f"CMD's own status passed on: {status} {err}"
    assert redis.cli("EXISTS", name) == "0"


def test_fair_waiters_run_in_arrival_order(cli, redis, name, tmp_path):
    log = tmp_path / "order"
    gate = tmp_path / "gate"
    holder = start(cli, redis.uri, "--fair", name, "--", "sh", "-c",
                   f"while [ ! -e {gate} ]; do sleep 0.01; done")
    waiters = []
    try:
        wait_until(lambda: redis.cli("EXISTS", name) == "1", what="the holder")
        for i in range(4):
            waiters.append(start(cli, redis.uri, "--fair", "--wait", "30", name, "--",
                                 "sh", "-c", f"echo {i} >> {log}"))
            wait_until(lambda: redis.cli("LLEN", "redisson_lock_queue:{%s}" % name)
                       == str(i + 1), what=f"waiter {i} in the queue")
        gate.touch()
        assert finish(holder)[0] == 0
        for w in waiters:
            status, _, err = finish(w, timeout=30)
            assert status == 0, err
    finally:
        gate.touch()
        for p in [holder] + waiters:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    assert log.read_text().split() == ["0", "1", "2", "3"]


def test_permits_never_more_than_total(cli, redis, name, tmp_path):
    # Each CMD counts itself in and out with INCR/DECR and records the peak.
    body = (f"n=$(redis-cli -p {redis.port} incr {name}:in);"
            f" echo $n >> {tmp_path}/seen; sleep 0.2;"
            f" redis-cli -p {redis.port} decr {name}:in > /dev/null")
    procs = [start(cli, redis.uri, "--permits", "1", "--total", "2", "--wait", "30", name,
                   "--", "sh", "-c", body) for _ in range(6)]
    for p in procs:
        status, _, err = finish(p, timeout=60)
        assert status == 0, err
    seen = [int(x) for x in (tmp_path / "seen").read_text().split()]
    assert len(seen) == 6 and max(seen) == 2, f"holders seen at once: {seen}"
    assert redis.cli("GET", name) == "2", "all permits back"


def test_permits_busy_and_total_set_only_once(cli, redis, name):
    redis.cli("SET", name, "1")
    r = run(cli, redis.uri, "--permits", "2", "--total", "5", "--wait", "0.1", name, "--", "true")
    expect_status(r, BUSY, "2 permits of a semaphore of 1")
    assert redis.cli("GET", name) == "1", "--total does not change a set count"


def test_expirable_permits_with_a_lease_stop_cmd_when_it_ends(cli, redis, name):
    r = run(cli, redis.uri, "--permits", "1", "--total", "1", "--lease", "0.5",
            "--kill-after", "0", name, "--", "sleep", "10", timeout=20)
    expect_status(r, LOST, "CMD outlived its permit's lease")
    zset = redis.cli("ZCARD", f"{name}:timeout")
    assert zset in ("0", "1")
    wait_until(lambda: redis.cli("ZCARD", f"{name}:timeout") == "0" or
               run(cli, redis.uri, "--permits", "1", "--lease", "5", "--wait", "0", name,
                   "--", "true").returncode == 0, what="the permit back")


def test_several_names_are_held_together_and_env_names_them(cli, redis, name):
    a, b = f"{name}-a", f"{name}-b"
    r = run(cli, redis.uri, "--name", a, "--name", b, "--", "sh", "-c",
            f'redis-cli -p {redis.port} exists {a} {b}; echo "$REDLOCKC_LOCK"')
    expect_status(r, 0, "multi-name lock")
    exists, env = r.stdout.strip().split("\n")
    assert exists == "2" and env == f"{a},{b}", r.stdout
    assert redis.cli("EXISTS", a, b) == "0"


def test_several_names_take_none_when_one_is_busy(cli, redis, name, tmp_path):
    a, b = f"{name}-a", f"{name}-b"
    redis.cli("HSET", b, "00000000-0000-4000-8000-000000000000:1", "1")
    redis.cli("PEXPIRE", b, "30000")
    marker = tmp_path / "ran"
    r = run(cli, redis.uri, "--wait", "0.2", "--name", a, "--name", b, "--",
            "touch", str(marker))
    expect_status(r, BUSY, "one of the names busy")
    assert not marker.exists()
    assert redis.cli("EXISTS", a) == "0", "no partial hold"


def test_a_multi_name_hold_deleted_by_another_process_is_a_loss(cli, redis, name):
    a, b = f"{name}-a", f"{name}-b"
    p = start(cli, redis.uri, "--kill-after", "0", "--options", "watchdog_timeout_ms=600",
              "--name", a, "--name", b, "--", "sleep", "30")
    try:
        wait_until(lambda: redis.cli("EXISTS", a, b) == "2", what="the hold")
        redis.cli("DEL", b)
        status, _, err = finish(p, timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert status == LOST, f"exit {status}: {err}"


def subscribed(redis, channel):
    out = redis.cli("PUBSUB", "NUMSUB", channel)
    return out.split("\n")[-1].strip() == "1"


def script_calls(redis):
    """How many EVAL/EVALSHA calls the server has run (INFO commandstats)."""
    calls = 0
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_eval:", "cmdstat_evalsha:")):
            calls += int(line.split("calls=")[1].split(",")[0])
    return calls


def test_a_signal_ends_a_write_wait_and_readers_are_not_held_back(cli, redis, name, tmp_path):
    # The cancelled write acquire takes back the intent that holds new
    # readers back (3 s), as a lock wait keeps nothing when cancelled.
    inside, marker = tmp_path / "inside", tmp_path / "ran"
    reader = start(cli, redis.uri, "--read", name, "--", "sh", "-c", f"touch {inside}; sleep 30")
    try:
        wait_until(started_marker(inside), what="the reader's CMD")
        writer = start(cli, redis.uri, "--write", "--wait", "30", name, "--", "touch", str(marker))
        intent = "redlockc_rwlock_writers:{%s}" % name
        wait_until(lambda: redis.cli("ZCARD", intent) == "1", what="the writer to wait")
        writer.send_signal(signal.SIGINT)
        status, _, err = finish(writer, timeout=5)
        assert status == 128 + signal.SIGINT, f"expected 130, seen {status}; stderr: {err}"
        assert not marker.exists(), "CMD never ran"
        assert redis.cli("ZCARD", intent) == "0", "the writer's intent was taken back"
        r = run(cli, redis.uri, "--read", "--wait", "0", name, "--", "true")
        expect_status(r, 0, "a new reader right after the writer's wait was cancelled")
        assert redis.cli("HGET", name, "mode") == "read", "the first reader still holds"
    finally:
        reader.send_signal(signal.SIGTERM)
        finish(reader)
    assert redis.cli("EXISTS", name) == "0"


def test_a_signal_ends_a_fair_wait_and_its_place_in_the_queue(cli, redis, name, tmp_path):
    gate, marker = tmp_path / "gate", tmp_path / "ran"
    holder = start(cli, redis.uri, "--fair", name, "--", "sh", "-c",
                   f"i=0; while [ ! -e {gate} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done")
    queue = "redisson_lock_queue:{%s}" % name
    try:
        wait_until(lambda: redis.cli("EXISTS", name) == "1", what="the holder")
        waiter = start(cli, redis.uri, "--fair", "--wait", "30", name, "--", "touch", str(marker))
        wait_until(lambda: redis.cli("LLEN", queue) == "1", what="the waiter in the queue")
        waiter.send_signal(signal.SIGTERM)
        status, _, err = finish(waiter, timeout=5)
        assert status == 128 + signal.SIGTERM, f"expected 143, seen {status}; stderr: {err}"
        assert not marker.exists(), "CMD never ran"
        assert redis.cli("LLEN", queue) == "0", "the cancelled waiter left the queue"
    finally:
        gate.touch()
        finish(holder)
    assert redis.cli("EXISTS", name) == "0"


def test_a_signal_ends_a_semaphore_wait_made_in_one_call(cli, redis, name, tmp_path):
    # One acquire call waits on the semaphore's channel and tries again at
    # most once a second; waiting in calls of 250 ms tried eight times a
    # second. The fixed second below samples that rate; nothing awaits it.
    redis.cli("SET", name, "0")
    marker = tmp_path / "ran"
    p = start(cli, redis.uri, "--permits", "1", "--wait", "-1", name, "--", "touch", str(marker))
    try:
        wait_until(lambda: subscribed(redis, "redisson_sc:{%s}" % name), what="the waiter")
        before = script_calls(redis)
        time.sleep(1.2)
        tries = script_calls(redis) - before
        p.send_signal(signal.SIGINT)
        status, _, err = finish(p, timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(5)
    assert status == 128 + signal.SIGINT, f"expected 130, seen {status}; stderr: {err}"
    assert tries <= 3, f"the waiter tried {tries} times in 1.2 s: it waits in slices"
    assert not marker.exists(), "CMD never ran"
    assert redis.cli("GET", name) == "0", "no permit was created or lost"
    r = run(cli, redis.uri, "--permits", "1", "--total", "1", "--wait", "0", name, "--", "true")
    expect_status(r, BUSY, "the count stays as set")


@pytest.mark.parametrize("argv", [
    ["--read", "--write", "x", "--", "true"],
    ["--fair", "--permits", "2", "x", "--", "true"],
    ["--permits", "0", "x", "--", "true"],
    ["--permits", "x", "--", "true"],
    ["--total", "3", "x", "--", "true"],
    ["--read", "--name", "a", "--name", "b", "--", "true"],
    ["--read", "status", "x"],
])
def test_family_usage_errors_exit_64(cli, redis, argv):
    r = run(cli, redis.uri, *argv)
    expect_status(r, USAGE, f"argv {argv}")
