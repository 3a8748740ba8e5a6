"""The operator's flags: durations with units, -n, -E, waiting through a Redis
outage, -v while waiting, status with holders (and --json, checked against the
server), and watch."""
import json
import signal
import time

from clitools import Redis, finish, free_port, hold_raw, is_waiting, run, start, wait_until


def test_durations_take_units_and_bare_numbers_stay_seconds(cli, redis, name):
    hold_raw(redis, name, ms=20000)
    t0 = time.monotonic()
    r = run(cli, redis.uri, "-w", "300ms", name, "--", "true")
    took = time.monotonic() - t0
    assert r.returncode == 75, f"busy: expected 75, seen {r.returncode}: {r.stderr}"
    assert 0.25 < took < 3, f"-w 300ms waited {took:.2f} s"
    redis.cli("DEL", name)
    for lease, low, high in (("2s", 1000, 2000), ("3", 2000, 3000), ("0.05m", 2000, 3000)):
        r = run(cli, redis.uri, "-l", lease, "-w", "1m", name, "--",
                "redis-cli", "-p", str(redis.port), "PTTL", name)
        assert r.returncode == 0, f"-l {lease}: {r.stderr}"
        assert low < int(r.stdout) <= high, f"-l {lease}: PTTL {r.stdout.strip()}"
    for flag, value in (("-w", "5x"), ("-l", "ms"), ("-k", "-1s"), ("--wait", "1d")):
        r = run(cli, redis.uri, flag, value, name, "--", "true")
        assert r.returncode == 64, f"{flag} {value}: expected 64, seen {r.returncode}"
        assert "duration" in r.stderr and value in r.stderr, f"{flag} {value}: {r.stderr}"


def test_nonblock_and_conflict_exit_code(cli, redis, name):
    hold_raw(redis, name, ms=20000)
    t0 = time.monotonic()
    r = run(cli, redis.uri, "-n", name, "--", "true")
    assert r.returncode == 75 and time.monotonic() - t0 < 2, f"-n: {r.returncode} {r.stderr}"
    r = run(cli, redis.uri, "-n", "-E", "3", name, "--", "true")
    assert r.returncode == 3, f"-E 3 when busy: seen {r.returncode}"
    r = run(cli, redis.uri, "-w", "100ms", "--conflict-exit-code", "0", name, "--", "false")
    assert r.returncode == 0, f"-E 0: cron may treat 'another host has it' as success: {r.returncode}"
    r = run(cli, redis.uri, "-E", "300", name, "--", "true")
    assert r.returncode == 64 and "0-255" in r.stderr, f"-E 300: {r.returncode} {r.stderr}"
    redis.cli("DEL", name)
    r = run(cli, redis.uri, "-n", "-E", "3", name, "--", "sh", "-c", "exit 9")
    assert r.returncode == 9, f"free: CMD's own status, seen {r.returncode}"


def test_redis_started_late_during_wait_is_waited_for(cli, name):
    port = free_port()
    p = start(cli, f"redis://127.0.0.1:{port}", "-v", "-w", "15s", name, "--", "sh", "-c", "exit 5")
    time.sleep(1.0)
    assert p.poll() is None, "redlockc gave up at once with Redis down and --wait 15s"
    late = Redis(port=port)
    try:
        status, _, err = finish(p, timeout=20)
        assert status == 5, f"CMD ran once Redis came up: expected 5, seen {status}: {err}"
        assert "retrying" in err and "cannot reach Redis" in err, f"-v says so: {err}"
    finally:
        late.stop()


def test_redis_unreachable_for_the_whole_wait_exits_69_when_it_ends(cli, name):
    t0 = time.monotonic()
    r = run(cli, f"redis://127.0.0.1:{free_port()}", "-w", "1s", name, "--", "true")
    took = time.monotonic() - t0
    assert r.returncode == 69, f"expected 69, seen {r.returncode}: {r.stderr}"
    assert 0.9 < took < 5, f"retried until the wait ended: took {took:.2f} s"
    r = run(cli, f"redis://127.0.0.1:{free_port()}", "-n", name, "--", "true")
    assert r.returncode == 69, "-n: no retry, unavailable at once"


def test_redis_stopped_during_a_hold_stops_cmd_and_exits_79(cli, make_redis, name):
    r = make_redis()
    p = start(cli, r.uri, "--options", "watchdog_timeout_ms=1000;io_timeout_ms=200",
              "-k", "500ms", name, "--", "sleep", "30")
    wait_until(lambda: r.cli("EXISTS", name) == "1", what="the hold")
    r.stop_process()
    status, _, err = finish(p, timeout=15)
    assert status == 79, f"lost when renewals failed: expected 79, seen {status}: {err}"


def test_verbose_says_what_it_waits_for_and_since_when(cli, redis, name):
    hold_raw(redis, name, ms=20000)
    r = run(cli, redis.uri, "-v", "-w", "500ms", name, "--", "true")
    assert r.returncode == 75
    assert f"waiting for lock '{name}'" in r.stderr and " since 20" in r.stderr, r.stderr
    assert "lease left" in r.stderr, r.stderr


def test_status_json_matches_the_servers_state(cli, redis, name):
    field = "00000000-0000-4000-8000-000000000000:7"
    redis.cli("HSET", name, field, "2")
    redis.cli("PEXPIRE", name, 20000)
    redis.cli("SET", "redisson_lock_token:{%s}" % name, "41")
    waiter = start(cli, redis.uri, "-w", "20s", name, "--", "true")
    try:
        wait_until(lambda: is_waiting(redis, name), what="a waiter")
        r = run(cli, redis.uri, "status", "--json", name)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        node = got["nodes"][0]
        assert got["name"] == name and got["locked"] is True, got
        assert node["node"] == f"127.0.0.1:{redis.port}", node
        server_holders = redis.cli("HGETALL", name).split("\n")
        assert node["holders"] == [{"field": server_holders[0], "count": int(server_holders[1])}], \
            f"holders {node['holders']} vs HGETALL {server_holders}"
        pttl = int(redis.cli("PTTL", name))
        assert pttl - 1000 <= node["pttl_ms"] <= 20000, f"pttl {node['pttl_ms']} vs PTTL {pttl}"
        assert node["fencing_token"] == 41, node
        assert node["waiters"] == 1, f"one waiter subscribed: {node}"
        text = run(cli, redis.uri, "status", name).stdout
        assert f"holder: {field} count=2" in text and "waiters: 1" in text, text
    finally:
        redis.cli("DEL", name)
        redis.cli("PUBLISH", "redisson_lock__channel:{%s}" % name, "0")
        finish(waiter)
    r = run(cli, redis.uri, "status", "--json", name)
    got = json.loads(r.stdout)
    assert r.returncode == 1 and got["locked"] is False and got["nodes"][0]["holders"] == [], got
    assert run(cli, redis.uri, "--json", name, "--", "true").returncode == 64, "--json is status's"


def test_watch_follows_holders_and_hand_offs_until_sigterm(cli, redis, name):
    w = start(cli, redis.uri, "watch", name)
    try:
        time.sleep(0.5)
        for _ in range(2):  # two holders one after the other: two hand-offs
            r = run(cli, redis.uri, name, "--", "sleep", "0.4")
            assert r.returncode == 0, r.stderr
        time.sleep(0.4)
    finally:
        w.send_signal(signal.SIGTERM)
    status, out, err = finish(w)
    assert status == 0, f"watch ends with 0 on SIGTERM, seen {status}: {err}"
    held = [line for line in out.splitlines() if " held by " in line]
    assert len(held) >= 2, f"each holder shown: {out}"
    assert held[0].split(" held by ")[1].split("(")[0] != held[1].split(" held by ")[1].split("(")[0], \
        f"two different holders (fields): {held}"
    assert out.count("unlock message published") >= 2, out
    assert "free" in out.splitlines()[-2] or "free" in out, out
    assert "stopped by signal 15" in out, out


def test_verbose_shows_the_librarys_log_a_reconnect(cli, redis, name):
    # CMD kills every normal connection of the server (ours too); the
    # release that follows reconnects, and -v shows the library's line.
    r = run(cli, redis.uri, "-v", name, "--", "redis-cli", "-p", str(redis.port),
            "CLIENT", "KILL", "TYPE", "normal")
    assert r.returncode == 0, r.stderr
    assert "redlockc: info: reconnecting to 127.0.0.1" in r.stderr, r.stderr
