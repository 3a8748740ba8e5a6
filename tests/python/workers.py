"""Functions run in other processes by the multiprocessing tests.

They live in a module of their own so that the "spawn" start method can
import them by name in a fresh interpreter.
"""
import time


def hammer(uri, name, iterations, counter, results):
    """Takes the lock `iterations` times; under it, a non-atomic counter update.

    Each critical section is recorded as (enter_ns, exit_ns) on the
    system-wide monotonic clock, so the parent can check that none overlap;
    (errors, intervals) go to the `results` queue at the end.
    """
    import redlockc  # in the worker: a client never crosses a fork

    errors, intervals = 0, []
    with redlockc.Client(uri) as client:
        lock = client.lock(name)
        for _ in range(iterations):
            if not lock.acquire(timeout=30):
                errors += 1
                continue
            enter = time.monotonic_ns()
            value = counter.value
            time.sleep(0)
            counter.value = value + 1
            intervals.append((enter, time.monotonic_ns()))
            lock.release()
    results.put((errors, intervals))


def use_parent_client(lock, conn):
    """In a forked child: the parent's client must refuse, with a clear message."""
    import redlockc

    try:
        lock.acquire(blocking=False)
        conn.send(("no error", ""))
    except redlockc.ClosedError as e:
        conn.send(("closed", str(e)))
    except Exception as e:  # reported to the parent as a failure
        conn.send(("other", repr(e)))
