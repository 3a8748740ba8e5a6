"""on_lost: the callback runs on the watchdog thread, with the GIL, once per lost hold."""
import gc
import sys
import threading
import weakref

import pytest

import redlockc
from redis_servers import wait_until


@pytest.fixture
def wd_client(server, clients):
    """Watchdog lease 0.6 s: renewals every 0.2 s, so a loss is seen quickly."""
    return clients(server.uri, watchdog_timeout=0.6)


def test_callback_fires_once_after_the_key_is_deleted(server, wd_client, clients, raw):
    lock = wd_client.lock("gone")
    calls = []
    fired = threading.Event()

    @lock.on_lost
    def lost(which, error):
        calls.append((which, error, threading.current_thread(), threading.get_ident()))
        fired.set()

    assert lock.acquire(), "the free lock is taken"
    assert raw.delete("gone") == 1, "raw DEL of the lock"
    assert fired.wait(3), "on_lost did not fire within 3 s of the DEL"
    which, error, thread, ident = calls[0]
    assert which is lock, "the callback gets the Lock"
    assert isinstance(error, redlockc.LockLostError) and error.code == -6, f"error {error!r}"
    assert "gone" in str(error), f"the message names the lock: {error}"
    assert ident != threading.get_ident() and thread is not threading.main_thread(), \
        "it runs on the watchdog thread"
    assert not lock.owned(), "owned() is False once lost"

    other = clients(server.uri).lock("gone")
    assert other.acquire(blocking=False), "someone else takes it"
    with pytest.raises(redlockc.LockLostError):
        lock.release()
    assert other.owned(), "the new holder keeps it after our late release"
    # Two more renewal periods: still one call.
    assert not wait_until(lambda: len(calls) > 1, timeout=0.6), f"on_lost ran {len(calls)} times"
    other.release()


def test_an_exception_in_the_callback_goes_to_unraisablehook(wd_client, raw, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def broken(lock, error):
        raise ZeroDivisionError("callback bug")

    lock = wd_client.lock("broken")
    assert lock.on_lost(broken) is broken, "on_lost returns the callable"
    lock.acquire()
    raw.delete("broken")
    assert wait_until(lambda: reported, timeout=3), "nothing reached sys.unraisablehook"
    report = reported[0]
    assert report.exc_type is ZeroDivisionError and "callback bug" in str(report.exc_value), \
        f"the callback's own exception is reported: {report.exc_type} {report.exc_value}"
    assert "broken" in repr(report.object), f"the report names the callback: {report.object!r}"
    # The process and the client are fine: another lock works, and loses normally.
    fired = threading.Event()
    second = wd_client.lock("second")
    second.on_lost(lambda lock, error: fired.set())
    second.acquire()
    raw.delete("second")
    assert fired.wait(3), "a later callback still runs"


def test_on_lost_none_removes_the_callback(wd_client, raw):
    calls = []
    lock = wd_client.lock("quiet")
    lock.on_lost(lambda lock, error: calls.append(error))
    lock.on_lost(None)
    lock.acquire()
    raw.delete("quiet")
    assert wait_until(lambda: not lock.owned(), timeout=3), "the loss is seen"
    assert calls == [], "a removed callback is not called"
    with pytest.raises(TypeError, match="callable"):
        lock.on_lost("not callable")


def test_the_lock_may_be_dropped_and_the_client_closed_inside_the_callback(wd_client, raw):
    done = threading.Event()
    lock = wd_client.lock("selfish")
    ref = weakref.ref(lock)
    kept = [lock]  # the only reference outside the callback

    def lost(which, error):
        kept.clear()  # now the callback's own reference is the last one
        which.client.close()  # rlc_client_free on the watchdog thread itself
        done.set()

    lock.on_lost(lost)
    lock.acquire()
    del lock
    gc.collect()
    assert ref() is not None, "kept alive by the list"
    raw.delete("selfish")
    assert done.wait(3), "the callback ran"
    # Its Lock is freed on the watchdog thread when the callback returns.
    assert wait_until(lambda: ref() is None, timeout=3), "the Lock was not freed"
    assert wd_client.closed, "closed by the callback"
    with pytest.raises(redlockc.ClosedError):
        wd_client.lock("x")


def test_freeing_a_lock_waits_for_its_running_callback(wd_client, raw):
    entered, finished = threading.Event(), threading.Event()
    lock = wd_client.lock("slow")

    def slow(which, error):
        entered.set()
        # The workload of a slow callback, not a synchronisation: freeing the
        # handle meanwhile must wait for it rather than free what it uses.
        finished.wait(0.3)
        finished.set()

    lock.on_lost(slow)
    lock.acquire()
    raw.delete("slow")
    assert entered.wait(3), "the callback started"
    lock._handle.free()  # what the client does when the handle's last user goes (GIL released)
    assert finished.is_set(), "the handle was freed while its callback still ran"


def test_a_fixed_lease_that_runs_out_is_lost_at_its_end(server, clients):
    """A fixed lease (no watchdog) that ends while another client waits: the
    waiter gets the lock, and the first owner's handle says lost at once."""
    lock = clients(server.uri, fencing=True).lock("ran-out", owner=1)
    waiter = clients(server.uri, fencing=True).lock("ran-out", owner=2)
    calls = []
    fired = threading.Event()

    @lock.on_lost
    def lost(which, error):
        calls.append(error)
        fired.set()

    assert lock.acquire(lease=0.7), "the free lock is taken for 0.7 s"
    token = lock.fencing_token
    assert waiter.acquire(timeout=5), "the other client gets it once the lease ran out"
    assert fired.wait(3), "on_lost did not fire within 3 s of the lease's end"
    assert lock.owned() is False, "owned() once the lease ran out"
    assert lock.hold_count == 0, "hold_count once the lease ran out"
    assert lock.validity == 0.0, "validity once the lease ran out"
    with pytest.raises(redlockc.LockLostError):
        lock.fencing_token
    assert waiter.fencing_token > token, "the new holder's token is larger"
    error = calls[0]
    assert isinstance(error, redlockc.LockLostError) and error.code == -6, f"error {error!r}"
    assert "ran-out" in str(error), f"the message names the lock: {error}"
    with pytest.raises(redlockc.LockLostError):
        lock.release()
    assert waiter.owned(), "the new holder keeps it after our late release"
    assert not wait_until(lambda: len(calls) > 1, timeout=0.6), f"on_lost ran {len(calls)} times"
    waiter.release()
