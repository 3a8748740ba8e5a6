"""Processes: mutual exclusion across 4 worker processes; fork and the client."""
import multiprocessing
import pickle
import signal
import subprocess
import sys
import time

import pytest

import workers
from redis_servers import wait_until


def test_four_processes_500_acquisitions_each_never_overlap(server, raw):
    ctx = multiprocessing.get_context("spawn")  # workers start clean: no inherited state
    per_process = 500
    counter = ctx.RawValue("q", 0)  # no lock of its own: only ours protects it
    results = ctx.Queue()
    procs = [ctx.Process(target=workers.hammer,
                         args=(server.uri, "procs", per_process, counter, results))
             for _ in range(4)]
    for p in procs:
        p.start()
    try:
        done = [results.get(timeout=80) for _ in procs]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():  # only our own children, by their pid
                p.kill()
    errors = [e for e, _ in done]
    spans = sorted(span for _, spans in done for span in spans)
    assert errors == [0, 0, 0, 0], f"acquire errors per process: {errors}"
    assert counter.value == 4 * per_process, \
        f"counter {counter.value}, expected {4 * per_process}: an update was lost"
    assert len(spans) == 4 * per_process, f"{len(spans)} critical sections recorded"
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert overlaps == [], f"{len(overlaps)} overlapping critical sections, first {overlaps[:1]}"
    assert raw.exists("procs") == 0, "released at the end"


def test_a_forked_child_cannot_use_the_parents_client(client):
    lock = client.lock("forked")
    assert lock.acquire(), "the parent holds it (its connection is open)"
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    # With fork the child inherits `lock` itself (nothing is pickled).
    child = ctx.Process(target=workers.use_parent_client, args=(lock, child_end))
    child.start()
    assert parent_end.poll(30), "the child did not answer within 30 s"
    kind, message = parent_end.recv()
    child.join(30)
    assert child.exitcode == 0, f"child exit code {child.exitcode}"
    assert kind == "closed", f"in the child: {kind} {message}"
    assert "fork" in message, f"the message should say why: {message!r}"
    assert lock.owned(), "the parent still holds it, on its own connection"
    lock.release()


def test_clients_and_locks_refuse_to_be_pickled(client):
    for obj in (client, client.lock("p")):
        with pytest.raises(TypeError, match="create"):
            pickle.dumps(obj)


FROZEN_HOLDER = r"""
import sys, threading, redlockc
client = redlockc.Client(sys.argv[1], watchdog_timeout=0.6)
lock = client.lock("frozen")
lost = threading.Event()
lock.on_lost(lambda lock, error: lost.set())
assert lock.acquire()
print("held", flush=True)
print("lost" if lost.wait(20) else "not lost", flush=True)
try:
    lock.release()
    print("released", flush=True)
except redlockc.LockLostError:
    print("release: lock lost", flush=True)
"""


def test_a_holder_frozen_past_its_lease_learns_it_lost_the_lock(server, client, raw):
    proc = subprocess.Popen([sys.executable, "-c", FROZEN_HOLDER, server.uri],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held", "the other process holds it"
        proc.send_signal(signal.SIGSTOP)  # frozen: its watchdog cannot renew
        assert wait_until(lambda: raw.exists("frozen") == 0, timeout=3), \
            "the frozen holder's lease ended"
        lock = client.lock("frozen")
        assert lock.acquire(blocking=False), "we take it once the lease ended"
        resumed = time.monotonic()
        proc.send_signal(signal.SIGCONT)
        assert proc.stdout.readline().strip() == "lost", "its on_lost fired"
        assert time.monotonic() - resumed < 1.5, "within a few renewal periods of resuming"
        assert proc.stdout.readline().strip() == "release: lock lost", \
            "its late release() raised LockLostError"
        assert proc.wait(10) == 0, "the frozen holder exited normally"
        assert lock.owned(), "our hold is intact after its late release"
        lock.release()
    finally:
        if proc.poll() is None:  # our own child, by its pid
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
