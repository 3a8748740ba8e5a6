"""Metrics (rlc_client_metrics, REDLOCKC_1.1) checked against the operations the
test performs, the log callback seen through the "redlockc" logger, and the
Prometheus rendering."""
import logging
import sys
import threading
import time

import redlockc
from redis_servers import wait_until


def test_counters_follow_acquires_busy_and_waits(server, clients):
    a, b = clients(server.uri), clients(server.uri)
    lock = a.lock("counted", owner=1)
    assert lock.acquire() and lock.acquire(), "taken, then nested"
    lock.release()
    lock.release()
    other = b.lock("counted", owner=2)
    lock.acquire()
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0.1) is False
    got = {}
    waiter = threading.Thread(target=lambda: got.update(ok=other.acquire(timeout=5)))
    waiter.start()
    time.sleep(0.3)
    lock.release()
    waiter.join(10)
    assert got == {"ok": True}, got
    other.release()
    ma, mb = a.metrics(), b.metrics()
    assert ma["acquires"] == 3 and ma["busy"] == 0 and ma["waits"] == 0, ma
    assert mb["acquires"] == 1 and mb["busy"] == 2, mb
    assert mb["waits"] == 2, f"the 0.1 s try and the waiter found it busy and waited: {mb}"
    buckets = dict(mb["wait_buckets"])
    assert buckets[float("inf")] == 2, f"every wait is in the +Inf bucket: {mb}"
    assert buckets[0.25] == 1, f"the 0.1 s wait took <= 0.25 s, the other ~0.3 s: {mb}"
    assert buckets[0.5] == 2, f"both took <= 0.5 s: {mb}"
    assert 0.3 <= mb["wait_seconds_sum"] < 1.5, mb


def test_renewals_and_a_lost_hold_are_counted_and_logged(server, clients, raw, caplog):
    c = clients(server.uri, watchdog_timeout=0.6)
    lock = c.lock("renewed", owner=3)
    with caplog.at_level(logging.INFO, logger="redlockc"):
        lock.acquire()
        time.sleep(1.0)  # renewals every 0.2 s
        assert c.metrics()["renewals"] >= 3, c.metrics()
        raw.delete("renewed")
        assert wait_until(lambda: c.metrics()["lost"] == 1, timeout=3), c.metrics()
        assert wait_until(lambda: any("was lost" in r.getMessage() for r in caplog.records),
                          timeout=3), [r.getMessage() for r in caplog.records]
    record = next(r for r in caplog.records if "was lost" in r.getMessage())
    assert record.levelno == logging.WARNING and "renewed" in record.getMessage(), record
    assert record.redlockc_client == c.uuid, "the record names its client"


def test_a_reconnect_and_a_script_reload_are_counted_and_logged(server, clients, raw, caplog):
    c = clients(server.uri)
    lock = c.lock("reconnect", owner=4)
    with caplog.at_level(logging.INFO, logger="redlockc"):
        lock.acquire()
        lock.release()
        raw.execute_command("CLIENT", "KILL", "TYPE", "normal")
        lock.acquire()  # on a new connection
        lock.release()
        raw.execute_command("SCRIPT", "FLUSH")
        lock.acquire()  # EVALSHA -> NOSCRIPT -> EVAL
        lock.release()
    m = c.metrics()
    assert m["reconnects"] == 1, m
    assert m["script_reloads"] >= 1, m
    messages = [r.getMessage() for r in caplog.records]
    assert any("reconnecting to 127.0.0.1" in t for t in messages), messages
    assert any("NOSCRIPT" in t for t in messages), messages


def test_the_library_is_silent_by_default(server):
    code = ("import redlockc, sys; c = redlockc.Client(sys.argv[1]); l = c.lock('s', owner=1); "
            "l.acquire(); l.release(); c.close()")
    import subprocess
    done = subprocess.run([sys.executable, "-c", code, server.uri], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "" and done.stdout == "", done


def test_prometheus_text_with_and_without_prometheus_client(server, clients, monkeypatch):
    c = clients(server.uri)
    lock = c.lock("prom", owner=5)
    lock.acquire()
    lock.release()
    texts = [c.prometheus()]
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    texts.append(c.prometheus())
    for text in texts:
        line = next(ln for ln in text.splitlines() if ln.startswith("redlockc_acquires_total{"))
        assert f'client="{c.uuid}"' in line and float(line.split()[-1]) == 1, line
        assert "# TYPE redlockc_wait_seconds histogram" in text, text
        assert 'le="+Inf"' in text and "redlockc_wait_seconds_count" in text, text
    assert redlockc.prometheus_text(c) == texts[1], "module function, same text"



def test_a_log_handler_may_call_the_library(server, clients, raw):
    """Lines are handed over outside the library's locks: a handler that takes
    a lock itself (here on the reconnect line) does not deadlock."""
    c = clients(server.uri)
    seen = []
    handled = threading.Event()

    class Reentrant(logging.Handler):
        def emit(self, record):
            if "reconnecting" in record.getMessage() and not seen:
                inner = c.lock("from-the-handler", owner=77)
                seen.append(inner.acquire(timeout=1))
                inner.release()
                handled.set()

    handler = Reentrant(level=logging.INFO)
    logger = logging.getLogger("redlockc")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        lock = c.lock("outer", owner=78)
        lock.acquire()
        lock.release()
        raw.execute_command("CLIENT", "KILL", "TYPE", "normal")
        done = threading.Event()
        threading.Thread(target=lambda: (lock.acquire(), lock.release(), done.set()),
                         daemon=True).start()
        assert done.wait(10), "an acquire whose log handler acquires did not finish"
        # lines are handed over soon after the acquire, not before it returns
        assert handled.wait(10), "the reconnect line never reached the handler"
        assert seen == [True], f"the handler took its lock: {seen}"
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
