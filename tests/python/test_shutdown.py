"""Interpreter exit and signals with live clients: no hang, no crash."""
import os
import signal
import subprocess
import sys
import time

import pytest

from redis_servers import wait_until

PRELUDE = """
import sys, threading, time, redlockc
client = redlockc.Client(sys.argv[1], watchdog_timeout=0.6)
"""


def run_python(code, server, timeout=20):
    env = dict(os.environ)  # PYTHONPATH: the module under test
    return subprocess.run([sys.executable, "-c", PRELUDE + code, server.uri], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_exit_with_a_held_watchdog_lock_and_a_callback(server, raw):
    out = run_python("""
lock = client.lock("held-at-exit")
lock.on_lost(lambda lock, error: print("lost", flush=True))
assert lock.acquire()
print("held", flush=True)
""", server)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"
    assert out.stdout.split() == ["held"], f"stdout {out.stdout!r}"
    assert "Fatal" not in out.stderr and "Segmentation" not in out.stderr, out.stderr
    assert raw.exists("held-at-exit") == 1, "not released on exit: it expires with its lease"


def test_exit_while_a_daemon_thread_waits_forever(server, raw):
    raw.hset("never-free", "someone:1", 1)  # no expiry: the waiter never gets it
    out = run_python("""
lock = client.lock("never-free")
started = threading.Event()
def wait_forever():
    started.set()
    lock.acquire()
threading.Thread(target=wait_forever, daemon=True).start()
started.wait(5)
print("waiting", flush=True)
""", server)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"
    assert out.stdout.split() == ["waiting"], f"stdout {out.stdout!r}"


def test_exit_right_after_a_lost_callback_was_queued(server, raw):
    out = run_python("""
import redis
lock = client.lock("lost-at-exit")
lock.on_lost(lambda lock, error: time.sleep(0.05))
lock.acquire()
redis.Redis.from_url(sys.argv[1]).delete("lost-at-exit")
time.sleep(0.2)  # the renewal that finds it gone is due about now
""", server)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"


def test_ctrl_c_interrupts_a_main_thread_waiting_forever(server, raw):
    raw.hset("blocked", "someone:1", 1)
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + """
import signal
# A job started with & by a non-interactive shell (CI, a script) inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
print("waiting", flush=True)
try:
    client.lock("blocked").acquire()
except KeyboardInterrupt:
    print("interrupted", flush=True)
""", server.uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting", "the child started"
        # Inside acquire() once it subscribed: a signal before that proves nothing.
        assert wait_until(
            lambda: raw.pubsub_numsub("redisson_lock__channel:{blocked}")[0][1] == 1,
            timeout=10), "the child never started waiting"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:  # our own child, by its pid
            proc.kill()
            proc.wait(10)
    assert out.split() == ["interrupted"], f"stdout {out!r}, stderr {err!r}"
    assert took < 2, f"KeyboardInterrupt came {took:.2f} s after SIGINT (the wait is cancelled at once)"
    assert proc.returncode == 0, f"exit status {proc.returncode}"


def test_a_signal_handler_that_returns_lets_the_main_thread_wait_on(server):
    # The signal cancels the C wait so that the handler runs at once; a
    # handler that raises nothing must not end acquire(): it waits on and
    # gets the lock when the holder lets go.
    out = run_python("""
import os, signal
seen = []
signal.signal(signal.SIGUSR1, lambda sig, frame: seen.append(time.monotonic()))
holder = client.lock("sig-on", owner=9)
holder.acquire(lease=10)
def signal_then_free():
    time.sleep(0.3)  # the main thread is inside the C call by now
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.3)
    freed.append(time.monotonic())
    holder.release()
freed = []
t = threading.Thread(target=signal_then_free)
t.start()
got = client.lock("sig-on").acquire(timeout=10)
done = time.monotonic()
t.join()
print(got, len(seen), seen[0] < freed[0], round(done - freed[0], 1), flush=True)
""", server)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"
    # got, handler runs, the handler ran before the release, acquired soon after it
    assert out.stdout.split() == ["True", "1", "True", "0.0"], \
        f"stdout {out.stdout!r}, stderr {out.stderr!r}"


@pytest.mark.parametrize("take", [
    "with lock:\n        pass",
    "if lock.acquire():\n        lock.release()",  # waits without limit: cancelled
    "if lock.acquire(timeout=0.5):\n        lock.release()",  # one C call
], ids=["with", "acquire", "acquire_timeout"])
def test_ctrl_c_as_the_lock_comes_free_leaves_it_free(server, take):
    # SIGINT arrives while the main thread waits in C; the holder lets go
    # right after, so the C call takes the lock before Python runs the
    # handler. acquire() never returns True then, so it must give the lock
    # back itself: else nobody releases it and the watchdog renews it forever.
    out = run_python("""
import os, signal, redis
signal.signal(signal.SIGINT, signal.default_int_handler)  # see the test above
raw = redis.Redis.from_url(sys.argv[1])
lock = client.lock("ctrl-c")
holder = client.lock("ctrl-c", owner=9)

def take(lock):
    %s

for trial in range(10):
    holder.acquire(lease=10)
    waiting = threading.Event()
    def interrupt_then_free():
        waiting.wait(5)
        time.sleep(0.2)  # the main thread is inside the C call by now
        os.kill(os.getpid(), signal.SIGINT)
        holder.release()
    t = threading.Thread(target=interrupt_then_free)
    t.start()
    interrupted = False
    try:
        waiting.set()
        take(lock)
    except KeyboardInterrupt:
        interrupted = True
    t.join()
    print(trial, interrupted, lock.owned(), lock.hold_count, raw.exists("ctrl-c"), flush=True)
    while lock.hold_count:  # a leaked hold must not spoil the next trial
        lock.release()
""" % take, server, timeout=60)
    assert out.returncode == 0, f"exit status {out.returncode}: {out.stderr}"
    # trial, KeyboardInterrupt raised, owned(), hold_count, the key exists
    want = [f"{trial} True False 0 0" for trial in range(10)]
    assert out.stdout.splitlines() == want, \
        f"after each Ctrl-C, expected the lock free; saw (trial, interrupted, owned, " \
        f"hold_count, exists):\n{out.stdout}{out.stderr}"
