"""Lock loss and signals: on loss CMD's process group gets SIGTERM (then
SIGKILL) and redlockc exits 79; signals sent to redlockc reach CMD, and the
lock is released when CMD has exited."""
import signal
import time

import pytest

from clitools import finish, gone, hold_raw, is_waiting, run, start, wait_until

LOST = 79
FAST_WATCHDOG = ["--options", "watchdog_timeout_ms=600"]  # renewed every 200 ms


def loop(body="", seconds=10):
    """A shell loop that ends by itself after `seconds` (every wait bounded)."""
    n = seconds * 100
    return f"{body} i=0; while [ $i -lt {n} ]; do sleep 0.01; i=$((i+1)); done"


def held(redis, name):
    wait_until(lambda: redis.cli("EXISTS", name) == "1", what=f"lock {name} to be held")


def trapped(trap, ready):
    """A loop() whose shell has installed `trap` once the file `ready` exists:
    the lock is held before CMD starts, so a signal sent as soon as it is
    held could reach the shell before its trap (and kill it instead)."""
    return loop(f"{trap} : > {ready};")


def trap_set(ready):
    wait_until(ready.exists, what="CMD's trap to be set")


def test_lock_loss_sends_cmd_sigterm_and_exits_79(cli, redis, name, tmp_path):
    marker = tmp_path / "term"
    p = start(cli, redis.uri, *FAST_WATCHDOG, name, "--", "sh", "-c",
              trapped(f'trap "echo TERM > {marker}; exit 7" TERM;', tmp_path / "ready"))
    held(redis, name)
    trap_set(tmp_path / "ready")
    redis.cli("DEL", name)  # the lock is taken away under it
    status, _, err = finish(p)
    assert status == LOST, f"expected exit {LOST}, seen {status}; stderr: {err}"
    assert marker.exists() and marker.read_text() == "TERM\n", "CMD got SIGTERM"
    assert "lost" in err and "status 7" in err, f"stderr tells: {err!r}"


def test_lock_loss_sends_sigkill_after_kill_after(cli, redis, name, tmp_path):
    p = start(cli, redis.uri, *FAST_WATCHDOG, "--kill-after", "0.3", name, "--", "sh", "-c",
              trapped('trap "" TERM;', tmp_path / "ready"))
    held(redis, name)
    trap_set(tmp_path / "ready")
    redis.cli("DEL", name)
    status, _, err = finish(p)
    assert status == LOST, f"expected exit {LOST}, seen {status}; stderr: {err}"
    assert "status 137" in err, f"CMD ignored SIGTERM and was SIGKILLed: {err!r}"


def test_lock_loss_stops_what_cmd_started_too(cli, redis, name, tmp_path):
    pidfile = tmp_path / "pid"
    p = start(cli, redis.uri, *FAST_WATCHDOG, name, "--", "sh", "-c",
              f"sleep 60 & echo $! > {pidfile}; wait")
    held(redis, name)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the pid file")
    grandchild = int(pidfile.read_text())
    redis.cli("DEL", name)
    status, _, err = finish(p)
    assert status == LOST, f"expected exit {LOST}, seen {status}; stderr: {err}"
    wait_until(lambda: gone(grandchild), timeout=5,
               what=f"CMD's own child {grandchild} to be stopped with it")


def test_redis_going_away_is_a_loss_once_the_lease_ran_out(cli, make_redis, name):
    node = make_redis()
    p = start(cli, node.uri, *FAST_WATCHDOG, name, "--", "sh", "-c", loop())
    held(node, name)
    node.stop_process()  # renewals fail until the hold's validity has run out
    status, _, err = finish(p)
    assert status == LOST, f"expected exit {LOST}, seen {status}; stderr: {err}"
    assert "was lost" in err, f"stderr tells: {err!r}"


def test_release_force_by_another_process_is_a_loss_for_the_holder(cli, redis, name):
    p = start(cli, redis.uri, *FAST_WATCHDOG, name, "--", "sh", "-c", loop())
    held(redis, name)
    r = run(cli, redis.uri, "release", "--force", name)
    assert r.returncode == 0, f"release --force: expected 0, seen {r.returncode}: {r.stderr}"
    status, _, err = finish(p)
    assert status == LOST, f"holder: expected exit {LOST}, seen {status}; stderr: {err}"


def test_a_fixed_lease_that_runs_out_is_a_loss(cli, redis, name):
    p = start(cli, redis.uri, "--lease", "0.3", name, "--", "sh", "-c", loop())
    status, _, err = finish(p)
    assert status == LOST, f"expected exit {LOST}, seen {status}; stderr: {err}"
    assert "lease" in err, f"stderr says the lease ended: {err!r}"


def test_a_fixed_lease_long_enough_passes_on_cmd_status(cli, redis, name):
    r = run(cli, redis.uri, "--lease", "20", name, "--", "sh", "-c",
            f"redis-cli -p {redis.port} pttl {name}; exit 6")
    assert r.returncode == 6, f"expected exit 6, seen {r.returncode}: {r.stderr}"
    assert 0 < int(r.stdout) <= 20000, f"PTTL is the fixed lease: seen {r.stdout!r}"
    assert redis.cli("EXISTS", name) == "0", "released after CMD"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_reaches_cmd_and_the_lock_is_released(cli, redis, name, sig):
    p = start(cli, redis.uri, name, "--", "sleep", "30")
    held(redis, name)
    p.send_signal(sig)
    status, _, err = finish(p)
    assert status == 128 + sig, f"CMD killed by {sig.name}: expected {128 + sig}, seen {status}"
    # Released, not left to expire: the key is gone at once.
    assert redis.cli("EXISTS", name) == "0", "the lock is released when CMD has exited"


def test_cmd_that_handles_sigint_decides_the_exit_status(cli, redis, name, tmp_path):
    marker = tmp_path / "int"
    p = start(cli, redis.uri, name, "--", "sh", "-c",
              trapped(f'trap "echo INT >> {marker}; exit 0" INT;', tmp_path / "ready"))
    held(redis, name)
    trap_set(tmp_path / "ready")
    p.send_signal(signal.SIGINT)
    status, _, err = finish(p)
    assert status == 0, f"expected CMD's 0, seen {status}; stderr: {err}"
    assert marker.read_text() == "INT\n", f"CMD got SIGINT once: {marker.read_text()!r}"
    assert redis.cli("EXISTS", name) == "0", "released"


def test_a_signal_while_waiting_ends_redlockc_without_the_lock(cli, redis, name, tmp_path):
    hold_raw(redis, name)
    before = redis.cli("HGETALL", name)
    marker = tmp_path / "ran"
    p = start(cli, redis.uri, "--wait", "30", name, "--", "touch", str(marker))
    wait_until(lambda: is_waiting(redis, name), what="redlockc to wait")
    p.send_signal(signal.SIGINT)
    status, _, err = finish(p, timeout=5)
    assert status == 128 + signal.SIGINT, f"expected 130, seen {status}; stderr: {err}"
    assert not marker.exists(), "CMD never ran"
    assert redis.cli("HGETALL", name) == before, "the other owner's hold is untouched"


def test_ctrl_c_ends_an_unbounded_wait_at_once(cli, redis, name):
    # The wait is one library call that the signal cancels: no slice to sit out.
    hold_raw(redis, name)
    p = start(cli, redis.uri, "--wait", "-1", name, "--", "true")
    wait_until(lambda: is_waiting(redis, name), what="redlockc to wait")
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    status, _, err = finish(p, timeout=5)
    took = time.monotonic() - sent
    assert status == 128 + signal.SIGINT, f"expected 130, seen {status}; stderr: {err}"
    assert took < 0.2, f"redlockc took {took:.3f} s to end after SIGINT"


def test_a_signal_that_does_not_end_redlockc_lets_the_wait_go_on(cli, redis, name, tmp_path):
    hold_raw(redis, name, ms=1500)
    marker = tmp_path / "ran"
    p = start(cli, redis.uri, "--wait", "10", name, "--", "touch", str(marker))
    wait_until(lambda: is_waiting(redis, name), what="redlockc to wait")
    p.send_signal(signal.SIGUSR1)  # forwarded to CMD, and there is no CMD yet
    status, _, err = finish(p, timeout=10)
    assert status == 0, f"got the lock once the hold expired: status {status}; stderr: {err}"
    assert marker.exists(), "CMD ran"
