"""Threads: one client and one lock name shared by 16 Python threads."""
import threading
import time

import redlockc
from redis_servers import wait_until


def test_sixteen_threads_one_lock_no_lost_update(server, clients, raw):
    client = clients(server.uri)
    shared = client.lock("hammer")  # half the threads share one Lock object
    iterations = 100
    state = {"counter": 0, "inside": 0, "overlaps": 0, "errors": []}
    start = threading.Barrier(16)

    def work(index):
        lock = shared if index % 2 else client.lock("hammer")
        start.wait(10)
        for _ in range(iterations):
            try:
                if not lock.acquire(timeout=20):
                    state["errors"].append("acquire timed out")
                    continue
            except redlockc.Error as e:
                state["errors"].append(repr(e))
                continue
            state["inside"] += 1
            if state["inside"] != 1:
                state["overlaps"] += 1
            value = state["counter"]
            time.sleep(0)  # let another thread run in the middle of the update
            state["counter"] = value + 1
            state["inside"] -= 1
            lock.release()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in 60 s"
    assert state["errors"] == [], f"errors: {state['errors'][:5]}"
    assert state["overlaps"] == 0, f"{state['overlaps']} overlapping critical sections"
    assert state["counter"] == 16 * iterations, \
        f"counter {state['counter']}, expected {16 * iterations}: a lost update"
    assert raw.exists("hammer") == 0, "released at the end"


def test_the_gil_is_released_while_acquire_waits(server, clients, raw):
    holder = clients(server.uri).lock("busy")
    assert holder.acquire(), "the holder takes the free lock"
    lock = clients(server.uri).lock("busy")
    got = {}

    def wait():
        got["result"] = lock.acquire(timeout=10)
        if got["result"]:
            lock.release()

    waiter = threading.Thread(target=wait)
    waiter.start()
    # Once the waiter sleeps inside the C call (it subscribed first), this
    # thread runs Python: redis-py, a loop, and the holder's release. Had the
    # waiter kept the GIL, none of it could run until its 10 s wait ended,
    # and then the lock would have stayed busy: result False.
    assert wait_until(lambda: raw.pubsub_numsub("redisson_lock__channel:{busy}")[0][1] == 1,
                      timeout=5), "the waiter never subscribed"
    total = sum(i for i in range(100000))
    still_waiting = waiter.is_alive() and "result" not in got
    holder.release()
    waiter.join(15)
    assert total == 4999950000, "the loop ran to its end"
    assert still_waiting, "this thread ran Python while the other waited in acquire()"
    assert got.get("result") is True, f"the waiter got the lock released meanwhile: {got}"


def test_threads_get_distinct_owner_ids(client):
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(redlockc.thread_owner()))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    ids.append(redlockc.thread_owner())
    assert len(set(ids)) == 9 and all(i > 0 for i in ids), f"owner ids {ids}"
