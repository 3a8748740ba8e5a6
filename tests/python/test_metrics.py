"""Metrics (rlc_client_metrics, REDLOCKC_1.1) checked against the operations the
test performs, the log callback seen through the "redlockc" logger, and the
Prometheus rendering."""
import logging
import sys
import threading
import time
import urllib.request

import pytest

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
    # The library's line (the binding logs one of its own too, without a client).
    record = next((r for r in caplog.records
                   if "was lost" in r.getMessage() and hasattr(r, "redlockc_client")), None)
    assert record is not None, [r.getMessage() for r in caplog.records]
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


# ---- Prometheus: scraped over HTTP, as a Prometheus server reads them ----------

@pytest.fixture
def http_registry():
    """(registry, url): a fresh prometheus_client registry served over HTTP on
    a free loopback port by prometheus_client's own WSGI app (the one
    start_http_server serves), shut down after the test."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    import prometheus_client

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    registry = prometheus_client.CollectorRegistry()
    httpd = make_server("127.0.0.1", 0, prometheus_client.make_wsgi_app(registry),
                        handler_class=Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield registry, f"http://127.0.0.1:{httpd.server_port}/metrics"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def scrape(url):
    """{(sample name, ((label, value), ...)): value} of one HTTP scrape."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode("utf-8")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def sample(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_scraped_over_http_follow_the_operations(server, clients, http_registry):
    registry, url = http_registry
    a, b = clients(server.uri), clients(server.uri)
    redlockc.register_metrics(a, "api", registry=registry)
    redlockc.register_metrics(b, "worker", registry=registry)
    lock = a.lock("scraped", owner=1)
    assert lock.acquire() and lock.acquire(), "taken, then nested"
    other = b.lock("scraped", owner=2)
    assert other.acquire(blocking=False) is False
    assert other.acquire(timeout=0.05) is False
    got = {}
    waiter = threading.Thread(target=lambda: got.update(ok=other.acquire(timeout=10)))
    waiter.start()
    try:
        assert wait_until(lambda: sample(scrape(url), "redlock_waiters", client="worker") == 1,
                          timeout=5), scrape(url)
        m = scrape(url)
        assert sample(m, "redlock_locks_held", client="api") == 1, m
        assert sample(m, "redlock_locks_held", client="worker") == 0, m
        assert sample(m, "redlock_waiters", client="api") == 0, m
    finally:
        lock.release()
        lock.release()
        waiter.join(10)
    assert got == {"ok": True}, got
    m = scrape(url)
    count = "redlock_acquire_wait_seconds_count"
    assert sample(m, count, client="api", result="acquired") == 2, m
    assert sample(m, count, client="api", result="busy") == 0, m
    assert sample(m, count, client="worker", result="busy") == 2, m
    assert sample(m, count, client="worker", result="acquired") == 1, m
    assert sample(m, count, client="worker", result="error") == 0, m
    took = sample(m, "redlock_acquire_wait_seconds_sum", client="worker", result="acquired")
    assert took > 0, f"the waiter's wait is in the sum: {took}"
    assert sample(m, "redlock_acquire_wait_seconds_bucket", client="worker", result="busy",
                  le="+Inf") == 2, m
    assert sample(m, "redlock_waiters", client="worker") == 0, m
    assert sample(m, "redlock_locks_held", client="api") == 0, m
    assert sample(m, "redlock_locks_held", client="worker") == 1, m
    assert sample(m, "redlock_lock_lost_total", client="api", reason="expired_or_taken") == 0, m
    other.release()
    b.close()
    m = scrape(url)
    assert sample(m, "redlock_locks_held", client="worker") is None, "a closed client has no series"
    assert sample(m, "redlock_locks_held", client="api") == 0, m


def test_an_error_is_a_result_of_its_own(server, clients, http_registry):
    registry, url = http_registry
    c = clients(server.uri, io_timeout=0.2, connect_timeout=0.2)
    redlockc.register_metrics(c, registry=registry)
    server.kill()
    with pytest.raises(redlockc.Error):
        c.lock("down", owner=1).acquire(timeout=0.2)
    m = scrape(url)
    assert sample(m, "redlock_acquire_wait_seconds_count", client="default", result="error") == 1, m
    assert sample(m, "redlock_waiters", client="default") == 0, m


def test_a_client_label_is_one_clients(server, clients, http_registry):
    registry, url = http_registry
    a, b = clients(server.uri), clients(server.uri)
    redlockc.register_metrics(a, "api", registry=registry)
    redlockc.register_metrics(a, "api", registry=registry)  # the same client again: no change
    with pytest.raises(ValueError, match="'api' is already registered"):
        redlockc.register_metrics(b, "api", registry=registry)
    a.close()
    redlockc.register_metrics(b, "api", registry=registry)  # a closed client's label is free
    b.lock("relabelled", owner=1).acquire()
    assert sample(scrape(url), "redlock_locks_held", client="api") == 1
    redlockc.unregister_metrics(b, registry=registry)
    assert sample(scrape(url), "redlock_locks_held", client="api") is None


def test_losses_are_counted_by_reason(server, clients, raw, http_registry):
    registry, url = http_registry
    c = clients(server.uri, watchdog_timeout=0.6, io_timeout=0.1)
    redlockc.register_metrics(c, "lossy", registry=registry)
    taken = c.lock("taken", owner=1)
    taken.acquire()
    raw.delete("taken")
    lost = "redlock_lock_lost_total"
    assert wait_until(lambda: sample(scrape(url), lost, client="lossy",
                                     reason="expired_or_taken") == 1, timeout=5), scrape(url)
    stalled = c.lock("stalled", owner=2)
    stalled.acquire()
    server.pause()  # renewals time out until the validity runs out
    try:
        assert wait_until(lambda: sample(scrape(url), lost, client="lossy",
                                         reason="renewal_failed") == 1, timeout=5), scrape(url)
    finally:
        server.resume()
    m = scrape(url)
    assert sample(m, lost, client="lossy", reason="expired_or_taken") == 1, m


def test_renewals_are_scraped(server, clients, http_registry):
    registry, url = http_registry
    c = clients(server.uri, watchdog_timeout=0.3)
    redlockc.register_metrics(c, "renewing", registry=registry)
    lock = c.lock("renewed", owner=1)
    lock.acquire()
    renewals = "redlock_renewals_total"
    assert wait_until(lambda: sample(scrape(url), renewals, client="renewing", result="ok") >= 2,
                      timeout=5), scrape(url)
    lock.release()
    assert sample(scrape(url), renewals, client="renewing", result="ok") == \
        c.metrics()["renewals"], "the library's counter"


def test_prometheus_text_with_and_without_prometheus_client(server, clients, monkeypatch):
    c = clients(server.uri)
    lock = c.lock("prom", owner=5)
    lock.acquire()
    lock.release()
    texts = [c.prometheus("api")]
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    texts.append(c.prometheus("api"))
    for text in texts:
        line = next(ln for ln in text.splitlines()
                    if ln.startswith('redlock_acquire_wait_seconds_count{client="api",'
                                     'result="acquired"}'))
        assert float(line.split()[-1]) == 1, line
        assert "# TYPE redlock_acquire_wait_seconds histogram" in text, text
        assert 'redlock_locks_held{client="api"} 0' in text, text
        assert "# TYPE redlock_lock_lost_total counter" in text, text
    assert redlockc.prometheus_text(c, "api") == texts[1], "module function, same text"
    assert 'client="default"' in c.prometheus(), "the default label"


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
