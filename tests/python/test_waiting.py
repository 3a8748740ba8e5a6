"""Waiting: woken by the unlock message, bounded timeouts, crashed holders."""
import threading
import time

import pytest

import redlockc
from redis_servers import wait_until


class Waiter(threading.Thread):
    """lock.acquire(**kwargs) in a thread; records the result and when it returned."""

    def __init__(self, lock, **kwargs):
        super().__init__(daemon=True)
        self.lock, self.kwargs = lock, kwargs
        self.result = self.error = self.returned = None

    def run(self):
        try:
            self.result = self.lock.acquire(**self.kwargs)
            self.returned = time.monotonic()
            if self.result:
                self.lock.release()
        except redlockc.Error as e:
            self.error = e


def subscribers(raw, name):
    return raw.pubsub_numsub(f"redisson_lock__channel:{{{name}}}")[0][1]


def test_waiter_wakes_on_the_unlock_message_within_200ms(server, clients, raw):
    holder = clients(server.uri).lock("handoff")
    holder.acquire()  # a 30 s watchdog lease: only the message can wake the waiter
    waiter = Waiter(clients(server.uri).lock("handoff"), timeout=10)
    waiter.start()
    # Subscribed before it retries: an unlock from now on cannot be missed.
    assert wait_until(lambda: subscribers(raw, "handoff") == 1, timeout=3), "never subscribed"
    released = time.monotonic()
    holder.release()
    waiter.join(10)
    assert waiter.result is True, f"waiter got {waiter.result} / {waiter.error}"
    latency = waiter.returned - released
    assert latency < 0.2, f"waiter woke {latency * 1000:.0f} ms after the release"


def test_force_release_frees_any_holder_and_wakes_waiters(server, clients, raw):
    holder = clients(server.uri).lock("force")
    holder.acquire()
    waiter = Waiter(clients(server.uri).lock("force"), timeout=5)
    waiter.start()
    assert wait_until(lambda: subscribers(raw, "force") == 1, timeout=3), "never subscribed"
    admin = clients(server.uri).lock("force")
    forced = time.monotonic()
    admin.force_release()
    waiter.join(10)
    assert waiter.result is True and waiter.returned - forced < 0.5, \
        f"waiter: {waiter.result} after {(waiter.returned or 0) - forced:.3f} s"
    with pytest.raises(redlockc.LockLostError):
        holder.release()
    admin.force_release()  # nothing held: still fine


def test_waiter_takes_over_when_a_crashed_holders_lease_ends(client, raw):
    # A holder that will never unlock: a raw Redisson-layout hash with 0.4 s left.
    raw.hincrby("crashed", "9f1c2d4e-0000-4000-8000-000000000000:7", 1)
    raw.pexpire("crashed", 400)
    lock = client.lock("crashed")
    t0 = time.monotonic()
    assert lock.acquire(timeout=5), "acquired once the crashed holder's lease ended"
    took = time.monotonic() - t0
    assert 0.3 <= took < 2, f"acquired after {took:.3f} s (lease 0.4 s)"
    lock.release()


def test_bounded_wait_gives_up_on_time(server, clients):
    clients(server.uri).lock("bw").acquire()
    lock = clients(server.uri).lock("bw")
    t0 = time.monotonic()
    assert lock.acquire(timeout=0.3) is False, "busy for the whole 0.3 s"
    took = time.monotonic() - t0
    assert 0.29 <= took < 1.5, f"gave up after {took:.3f} s, timeout was 0.3 s"
    t0 = time.monotonic()
    assert lock.acquire(blocking=False) is False, "busy: one try"
    assert lock.acquire(timeout=0) is False, "timeout=0: one try"
    assert time.monotonic() - t0 < 1, "non-blocking tries return at once"


def test_main_thread_waits_longer_than_a_slice_and_still_wakes_on_unlock(server, clients):
    # The main thread waits in slices (for Ctrl-C); the wait must stay one wait.
    holder = clients(server.uri).lock("sliced")
    holder.acquire(lease=1.2)  # expires by itself, after more than two slices
    lock = clients(server.uri).lock("sliced")
    t0 = time.monotonic()
    assert lock.acquire(timeout=5), "acquired once the holder's lease ended"
    took = time.monotonic() - t0
    assert 1.0 <= took < 3, f"acquired after {took:.3f} s (lease 1.2 s)"
    lock.release()
    holder_again = clients(server.uri).lock("sliced")
    holder_again.acquire()
    t0 = time.monotonic()
    assert lock.acquire(timeout=1.1) is False, "busy throughout"
    took = time.monotonic() - t0
    assert 1.09 <= took < 2, f"a sliced bounded wait gave up after {took:.3f} s, not 1.1"


def test_sixteen_threads_waiting_do_not_stall_other_threads(server, clients):
    holder = clients(server.uri)
    held = [holder.lock(f"w{i}") for i in range(16)]
    for lock in held:
        lock.acquire()
    c = clients(server.uri)
    waiters = [Waiter(c.lock(f"w{i}"), timeout=20) for i in range(16)]
    for w in waiters:
        w.start()
    # With 16 threads blocked in acquire, this thread still runs Python and
    # takes and releases a free lock of the same client.
    free = c.lock("free")
    t0 = time.monotonic()
    for _ in range(50):
        assert free.acquire(blocking=False), "a free lock is taken while others wait"
        free.release()
    assert time.monotonic() - t0 < 10, "50 cycles took longer than 10 s"
    assert all(w.is_alive() for w in waiters), "every waiter is still waiting"
    # Each waiter wakes when its own lock is released, not later.
    for lock, w in zip(held, waiters):
        released = time.monotonic()
        lock.release()
        w.join(10)
        assert w.result is True, f"waiter for {lock.name}: {w.result} / {w.error}"
        assert w.returned - released < 0.5, \
            f"{lock.name}: woke {w.returned - released:.3f} s after its release"
