"""redlockc.asyncio's metrics() and prometheus(): the engine's counters
(rlc_engine_metrics) in the dict the blocking Client gives, against real
redis-server processes.

Every wait is bounded (asyncio.wait_for, or `until` polling a condition);
the one sleep is the holder keeping the lock ~150 ms, the scenario itself.
"""
import asyncio
import logging
import sys

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, elsewhere, subscribers, until
from test_metrics import http_registry, sample, scrape  # noqa: F401 (http_registry: a fixture)

pytestmark = pytest.mark.asyncio

INF = float("inf")


def zero(m):
    """The counters of m that are not 0 (a fresh client's: none)."""
    buckets = {le: n for le, n in m["wait_buckets"] if n}
    rest = {k: v for k, v in m.items() if k != "wait_buckets" and v}
    return {**rest, **({"wait_buckets": buckets} if buckets else {})}


async def test_the_dict_has_the_blocking_clients_keys_and_buckets(server):
    """Same keys, same bucket bounds; all zero, read with no I/O and no loop bound."""
    blocking = redlockc.Client(server.uri)
    try:
        expected = blocking.metrics()
    finally:
        blocking.close()
    async with aclient(server.uri) as c:
        m = c.metrics()  # before any use: the client is not bound to a loop yet
    assert set(m) == set(expected), f"keys {sorted(m)}, the blocking client's {sorted(expected)}"
    assert [le for le, _ in m["wait_buckets"]] == [le for le, _ in expected["wait_buckets"]], \
        f"bucket bounds {m['wait_buckets']}, the blocking client's {expected['wait_buckets']}"
    assert m["wait_buckets"][-1][0] == INF, m["wait_buckets"]
    assert zero(m) == {}, f"a fresh client counts nothing: {m}"
    counts = {k: v for k, v in m.items() if k not in ("wait_buckets", "wait_seconds_sum")}
    assert all(type(v) is int for v in counts.values()), m


async def test_acquires_and_busy_are_counted(server):
    async with aclient(server.uri) as c:
        lock, other = c.lock("counted"), c.lock("counted")
        assert await lock.acquire() and await lock.acquire(), "taken, then nested"
        assert await elsewhere(other.acquire, blocking=False) is False  # another task
        assert await elsewhere(other.acquire, timeout=0) is False
        await lock.release()
        await lock.release()
        m = c.metrics()
        assert m["acquires"] == 2, f"the first acquire and the nested one: {m}"
        assert m["busy"] == 2, f"two tries found it busy: {m}"
        assert m["waits"] == 0 and m["wait_seconds_sum"] == 0, f"no try waited: {m}"
        assert m["renewals"] == 0 and m["lost"] == 0 and m["reconnects"] == 0, m


async def test_an_acquire_that_waited_counts_one_wait_with_its_time(server, raw):
    """Another client holds the lock and releases it ~160 ms after the waiter
    started: one wait of at least 150 ms, in the first bucket that bounds it."""
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        holder = holder_client.lock("waited")
        assert await holder.acquire()
        loop = asyncio.get_running_loop()
        waiter = c.lock("waited")
        task = asyncio.ensure_future(waiter.acquire(timeout=10))
        await asyncio.sleep(0)  # the task runs up to its first await: the acquire is sent
        started = loop.time()
        assert await until(lambda: subscribers(raw, "waited") >= 1), "the waiter waits"
        await asyncio.sleep(max(0.0, started + 0.16 - loop.time()))
        await holder.release()
        assert await asyncio.wait_for(task, 10), "the waiter got the lock"
        await waiter.release()

        m = c.metrics()
        assert m["waits"] == 1, f"one acquire found it busy and waited: {m}"
        assert m["acquires"] == 1 and m["busy"] == 0, m
        assert 0.15 <= m["wait_seconds_sum"] < 10, f"the wait took >= 0.15 s: {m}"
        took = m["wait_seconds_sum"]
        buckets = m["wait_buckets"]
        first = next(i for i, (le, _) in enumerate(buckets) if le >= took)
        assert buckets[first][1] == 1, \
            f"the {took} s wait is counted by the bucket le={buckets[first][0]}: {buckets}"
        assert all(n == 0 for _, n in buckets[:first]), \
            f"and by no bucket below {took} s: {buckets}"
        assert all(n == 1 for _, n in buckets[first:]), f"buckets are cumulative: {buckets}"
        hm = holder_client.metrics()
        assert hm["acquires"] == 1 and hm["waits"] == 0, f"the holder did not wait: {hm}"


async def test_the_watchdog_renewals_are_counted(server):
    async with aclient(server.uri, watchdog_timeout=0.3) as c:
        lock = c.lock("renewed")
        await lock.acquire()
        assert c.metrics()["renewals"] == 0, "no renewal yet at the grant"
        # renewals every 0.1 s
        assert await until(lambda: c.metrics()["renewals"] >= 3, timeout=5), c.metrics()
        seen = c.metrics()["renewals"]
        assert await until(lambda: c.metrics()["renewals"] > seen, timeout=5), \
            f"renewals stayed at {seen} while the lock was held: {c.metrics()}"
        assert lock.owned() and c.metrics()["lost"] == 0, c.metrics()
        await lock.release()


async def test_a_script_flush_is_counted_as_a_script_reload(server, raw):
    async with aclient(server.uri) as c:
        lock = c.lock("flushed")
        await lock.acquire()
        await lock.release()
        # each script's first call on this server loaded it: no reload, as
        # for the blocking client (which loads them as it connects)
        assert c.metrics()["script_reloads"] == 0, c.metrics()
        raw.execute_command("SCRIPT", "FLUSH")
        assert await lock.acquire(), "EVALSHA -> NOSCRIPT -> EVAL, and the acquire succeeds"
        m = c.metrics()
        assert m["script_reloads"] == 1, \
            f"the acquire's NOSCRIPT answer after SCRIPT FLUSH was counted once: {m}"
        assert m["acquires"] == 2, m
        await lock.release()


async def test_a_key_deleted_behind_the_holder_counts_one_lost_hold(server, raw):
    async with aclient(server.uri, watchdog_timeout=0.6) as c:
        lock = c.lock("gone")
        await lock.acquire()
        assert raw.delete("gone") == 1
        await asyncio.wait_for(lock.lost.wait(), 5)
        assert c.metrics()["lost"] == 1, c.metrics()
        with pytest.raises(aio.LockLostError):
            await lock.release()
        assert c.metrics()["lost"] == 1, \
            f"the release that found it lost again does not count it twice: {c.metrics()}"


async def test_metrics_on_a_closed_client_raises_closed_as_the_blocking_one(server):
    c = aio.Client(server.uri)
    lock = c.lock("closing")
    await lock.acquire()
    await lock.release()
    await c.close()
    with pytest.raises(aio.ClosedError):
        c.metrics()
    blocking = redlockc.Client(server.uri)
    blocking.close()
    with pytest.raises(redlockc.ClosedError):
        blocking.metrics()


async def test_prometheus_text_with_and_without_prometheus_client(server, monkeypatch):
    async with aclient(server.uri) as c:
        lock = c.lock("prom")
        await lock.acquire()
        await lock.release()
        texts = [c.prometheus("aio")]
        monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
        texts.append(c.prometheus("aio"))
        for text in texts:
            line = next(ln for ln in text.splitlines()
                        if ln.startswith('redlock_acquire_wait_seconds_count{client="aio",'
                                         'result="acquired"}'))
            assert float(line.split()[-1]) == 1, line
            assert "# TYPE redlock_acquire_wait_seconds histogram" in text, text
            assert 'redlock_locks_held{client="aio"} 0' in text, text
        assert redlockc.prometheus_text(c, "aio") == texts[1], "the module function, the same text"


async def test_metrics_scraped_over_http_follow_the_operations(server, raw, http_registry):
    """Scraped from another thread while the loop runs, as a Prometheus server does."""
    registry, url = http_registry
    async with aclient(server.uri) as holder_client, aclient(server.uri) as c:
        redlockc.register_metrics(holder_client, "holder", registry=registry)
        redlockc.register_metrics(c, "waiter", registry=registry)

        async def scraped():
            return await asyncio.get_running_loop().run_in_executor(None, scrape, url)

        holder = holder_client.lock("scraped")
        assert await holder.acquire()
        waiter = c.lock("scraped")
        assert await elsewhere(waiter.acquire, timeout=0) is False
        task = asyncio.ensure_future(waiter.acquire(timeout=10))
        assert await until(lambda: subscribers(raw, "scraped") >= 1), "the waiter waits"
        m = await scraped()
        assert sample(m, "redlock_waiters", client="waiter") == 1, m
        assert sample(m, "redlock_locks_held", client="holder") == 1, m
        assert sample(m, "redlock_locks_held", client="waiter") == 0, m
        await holder.release()
        assert await asyncio.wait_for(task, 10)
        m = await scraped()
        count = "redlock_acquire_wait_seconds_count"
        assert sample(m, "redlock_waiters", client="waiter") == 0, m
        assert sample(m, "redlock_locks_held", client="holder") == 0, m
        assert sample(m, "redlock_locks_held", client="waiter") == 1, m
        assert sample(m, count, client="holder", result="acquired") == 1, m
        assert sample(m, count, client="waiter", result="busy") == 1, m
        assert sample(m, count, client="waiter", result="acquired") == 1, m
        await waiter.release()
        assert sample(await scraped(), "redlock_locks_held", client="waiter") == 0


async def test_a_reconnect_and_lost_scripts_are_logged_at_info(server, raw, caplog):
    # The engine's INFO lines reach the "redlockc" logger as the blocking
    # client's do (rlc_client_set_log): a command connection made again,
    # and a server that lost the scripts it had run.
    with caplog.at_level(logging.INFO, logger="redlockc"):
        async with aclient(server.uri) as c:
            lock = c.lock("relogged")
            assert await lock.acquire()
            await lock.release()
            assert not [r for r in caplog.records if "reconnecting" in r.getMessage()]
            # Scripts lost on a live connection: loaded again, said once.
            # (A new connection loads them before its first call: a flush
            # followed by a kill would show no loss.)
            raw.execute_command("SCRIPT", "FLUSH")
            assert await lock.acquire()
            await lock.release()
            raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            got = False
            for _ in range(10):  # the first try may meet the dead connection
                try:
                    got = await lock.acquire(blocking=False)
                except redlockc.Error:
                    continue
                if got:
                    break
            assert got, "acquired again after the kill"
            await lock.release()
            assert await until(lambda: c.metrics()["reconnects"] >= 1)

            def lines(word):
                return [r for r in caplog.records
                        if r.name == "redlockc" and word in r.getMessage()]
            assert lines("reconnecting to 127.0.0.1"), caplog.records
            assert all(r.levelno == logging.INFO for r in lines("reconnecting")), caplog.records
            reloads = lines("had lost the scripts")
            assert len(reloads) == c.metrics()["script_reloads"] >= 1, caplog.records
            assert all(r.levelno == logging.INFO for r in reloads)
