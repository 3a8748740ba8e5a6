"""The operator's flags: durations with units, -n, -E, waiting through a Redis
outage, -v while waiting, status (and --json, checked against the server), and
watch."""
import json
import signal
import time

from clitools import (Lines, Redis, finish, free_port, hold_raw, run, start,
                      status_and_watch_follow_a_holder, wait_until)


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
    try:
        r = run(cli, redis.uri, "status", "--json", name)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        pttl = int(redis.cli("PTTL", name))
        assert set(got) == {"name", "locked", "pttl_ms"}, got
        assert got["name"] == name and got["locked"] is True, got
        assert pttl <= got["pttl_ms"] <= 20000, f"pttl {got['pttl_ms']} vs PTTL {pttl} after it"
        text = run(cli, redis.uri, "status", name).stdout
        assert text.startswith(f"name: {name}\nlocked: yes\npttl_ms: "), text
        redis.cli("PERSIST", name)
        got = json.loads(run(cli, redis.uri, "status", "--json", name).stdout)
        assert got["locked"] is True and got["pttl_ms"] == -1, f"no expiry: {got}"
    finally:
        redis.cli("DEL", name)
    r = run(cli, redis.uri, "status", "--json", name)
    got = json.loads(r.stdout)
    assert r.returncode == 1 and got == {"name": name, "locked": False, "pttl_ms": -2}, got
    assert run(cli, redis.uri, "--json", name, "--", "true").returncode == 64, "--json is status's"


def test_watch_follows_holders_until_sigterm(cli, redis, name):
    lines = status_and_watch_follow_a_holder(cli, redis.uri, name)
    assert lines[0].endswith(f"watching lock '{name}' (Ctrl-C ends)"), lines


def test_watch_shows_each_renewal_of_the_lease(cli, redis, name):
    fast = ["--options", "watchdog_timeout_ms=900"]  # renewed every 300 ms
    watch = Lines(start(cli, redis.uri, "watch", name))
    holder = start(cli, redis.uri, *fast, name, "--", "sleep", "30")
    try:
        held = watch.wait_for(" held, lease ", what="watch sees the holder")
        again = watch.wait_for(" lease set again", after=held + 1, what="a renewal")
        watch.wait_for(" lease set again", after=again + 1, what="the next renewal")
    finally:
        holder.send_signal(signal.SIGTERM)
        finish(holder)
        watch.proc.send_signal(signal.SIGTERM)
    status, err = watch.finish()
    assert status == 0, err
