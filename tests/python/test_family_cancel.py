"""Ctrl-C during a blocking family acquire in the main thread, as for Lock.

The main thread's wait is one C call that a signal cancels (the handle's
rlc_*_cancel, through _interrupt.py): the handler's KeyboardInterrupt comes
at once and nothing is kept (a writer's intent and a fair waiter's place in
the queue go with the wait, no permit is taken). Each child process below is
our own, ended by its pid.
"""
import os
import signal
import subprocess
import sys

import pytest

from redis_servers import wait_until

PRELUDE = """
import os, signal, sys, threading, time, redlockc
# A job started with & by a non-interactive shell (CI, a script) inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
signal.signal(signal.SIGINT, signal.default_int_handler)
client = redlockc.Client(sys.argv[1])
N = "fc"
"""

# Per kind: what holds it (another owner), the waiter's blocking call, and
# how the waiter's hold count reads (0 after the interrupt).
KINDS = {
    "rwlock_write": ("client.rwlock(N, owner=9).read().acquire(lease=30)",
                     "w = client.rwlock(N).write(); w.acquire()", "w.hold_count"),
    "rwlock_read": ("client.rwlock(N, owner=9).write().acquire(lease=30)",
                    "w = client.rwlock(N).read(); w.acquire()", "w.hold_count"),
    "fair_lock": ("client.fair_lock(N, owner=9).acquire(lease=30)",
                  "w = client.fair_lock(N); w.acquire()", "w.hold_count"),
    "semaphore": ("client.semaphore(N, 1).acquire()",
                  "w = client.semaphore(N); w.acquire()", "w.available"),
    "permit_semaphore": ("client.permit_semaphore(N, 1).acquire(lease=30)",
                         "w = client.permit_semaphore(N); w.acquire(lease=30)", "w.available"),
    "multi_lock": ("client.lock('fc-b', owner=9).acquire(lease=30)",
                   "w = client.multi_lock(['fc-a', 'fc-b']); w.acquire()", "len(w.names)"),
}


def waiting(raw, kind):
    """True once the child's acquire waits (it is inside the C call)."""
    if kind == "fair_lock":
        return raw.llen("redisson_lock_queue:{fc}") == 1
    channel = {"rwlock_write": "redisson_rwlock:{fc}", "rwlock_read": "redisson_rwlock:{fc}",
               "semaphore": "redisson_sc:{fc}", "permit_semaphore": "redisson_sc:{fc}",
               "multi_lock": "redisson_lock__channel:{fc-b}"}[kind]
    return raw.pubsub_numsub(channel)[0][1] == 1


def start_child(code, server):
    env = dict(os.environ)  # PYTHONPATH: the module under test
    return subprocess.Popen([sys.executable, "-c", PRELUDE + code, server.uri], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=10):
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its pid
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"the child still waited {timeout} s after SIGINT: "
                             f"stdout {out!r}, stderr {err!r}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ctrl_c_interrupts_a_family_wait_in_the_main_thread(server, raw, kind):
    hold, take, count = KINDS[kind]
    proc = start_child(f"""
{hold}
print("waiting", flush=True)
try:
    {take}
    print("acquired", flush=True)
except KeyboardInterrupt:
    print("interrupted", {count}, flush=True)
""", server)
    try:
        assert proc.stdout.readline().strip() == "waiting", "the child started"
        assert wait_until(lambda: waiting(raw, kind), timeout=10), "the child never waited"
        proc.send_signal(signal.SIGINT)
        out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # The semaphores: 0 available (the holder's permit), none taken or lost.
    want = {"multi_lock": "2"}.get(kind, "0")
    assert out.split() == ["interrupted", want], f"stdout {out!r}, stderr {err!r}"
    assert proc.returncode == 0, f"exit status {proc.returncode}: {err}"
    if kind == "rwlock_write":
        assert raw.zcard("redlockc_rwlock_writers:{fc}") == 0, "the writer's intent went"
        assert raw.hget("fc", "mode") == b"read", "the reader still holds"
    if kind == "fair_lock":
        assert raw.llen("redisson_lock_queue:{fc}") == 0, "the waiter left the queue"
    if kind == "multi_lock":
        assert raw.exists("fc-a") == 0, "the free name was not kept"


def test_a_handler_that_returns_lets_a_family_wait_go_on(server):
    out = start_child("""
seen, freed = [], []
signal.signal(signal.SIGUSR1, lambda sig, frame: seen.append(time.monotonic()))
holder = client.rwlock(N, owner=9).read()
holder.acquire(lease=10)
def signal_then_free():
    time.sleep(0.3)  # the main thread is inside the C call by now
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.3)
    freed.append(time.monotonic())
    holder.release()
t = threading.Thread(target=signal_then_free)
t.start()
got = client.rwlock(N).write().acquire(timeout=10)
t.join()
print(got, len(seen), seen[0] < freed[0], flush=True)
""", server)
    stdout, err = finish(out, timeout=30)
    # acquired, the handler ran once, before the holder let go
    assert stdout.split() == ["True", "1", "True"], f"stdout {stdout!r}, stderr {err!r}"


@pytest.mark.parametrize("kind", ["rwlock_write", "semaphore"])
def test_ctrl_c_as_a_family_lock_comes_free_leaves_it_free(server, raw, kind):
    # SIGINT arrives while the main thread waits in C; the holder lets go
    # right after, so the C call may take it before Python runs the handler.
    # acquire() never returns then, so it gives back what it took: else a
    # write level would be renewed forever, a permit lost for good.
    setup, take, free = {
        "rwlock_write": ("holder = client.rwlock(N, owner=9).write(); w = client.rwlock(N).write()",
                         "w.acquire()", "holder.release()"),
        "semaphore": ("holder = client.semaphore(N, 1); w = client.semaphore(N)",
                      "w.acquire()", "holder.release()"),
    }[kind]
    grab = "holder.acquire(lease=10)" if kind == "rwlock_write" else "holder.acquire()"
    proc = start_child(f"""
import redis
raw = redis.Redis.from_url(sys.argv[1])
{setup}
for trial in range(10):
    {grab}
    waiting = threading.Event()
    def interrupt_then_free():
        waiting.wait(5)
        time.sleep(0.2)  # the main thread is inside the C call by now
        os.kill(os.getpid(), signal.SIGINT)
        {free}
    t = threading.Thread(target=interrupt_then_free)
    t.start()
    interrupted = False
    try:
        waiting.set()
        {take}
    except KeyboardInterrupt:
        interrupted = True
    t.join()
    left = raw.exists(N) if {kind == "rwlock_write"} else raw.get(N).decode()
    print(trial, interrupted, left, flush=True)
    if {kind == "rwlock_write"}:
        while w.hold_count:  # a leaked hold must not spoil the next trial
            w.release()
    else:
        raw.set(N, 1)
""", server)
    out, err = finish(proc, timeout=60)
    free_state = "0" if kind == "rwlock_write" else "1"
    want = [f"{trial} True {free_state}" for trial in range(10)]
    assert out.splitlines() == want, \
        f"after each Ctrl-C, expected it free; saw (trial, interrupted, exists/permits):\n" \
        f"{out}{err}"
