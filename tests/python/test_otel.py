"""OpenTelemetry spans of the plain locks ("redlock.acquire", "redlock.hold"),
seen by the SDK's InMemorySpanExporter, against real redis-server processes.

The binding imports opentelemetry-api when it is installed; Debian 12 ships
neither it nor the SDK, so this module installs both from PyPI once into
RLC_BUILD_DIR/otel-site (pip --target) and runs each scenario in a child
Python with that directory on its path: the suite's own process keeps the
binding without the API (the no-API path every other test runs).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.join(os.environ.get("RLC_BUILD_DIR", os.path.join(HERE, "..", "..", "build")),
                    "otel-site")


@pytest.fixture(scope="module")
def otel_site():
    """A directory with opentelemetry-api and -sdk from PyPI (installed once)."""
    marker = os.path.join(SITE, ".installed")
    if not os.path.exists(marker):
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", "--upgrade", "--target", SITE,
                               "opentelemetry-api", "opentelemetry-sdk"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"pip install opentelemetry-sdk (PyPI): {done.stderr}"
        open(marker, "w").close()
    return SITE


PRELUDE = """
import json, sys, threading, time
import redlockc, redlockc.asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

uri = sys.argv[1]
exporter = InMemorySpanExporter()
if "--no-sdk" not in sys.argv:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
tracer = trace.get_tracer("test")


def dump(extra=None):
    spans = [{"name": s.name, "attributes": dict(s.attributes or {}),
              "status": s.status.status_code.name,
              "events": [e.name for e in s.events],
              "seconds": (s.end_time - s.start_time) / 1e9,
              "trace": s.context.trace_id, "id": s.context.span_id,
              "parent": s.parent.span_id if s.parent else None}
             for s in exporter.get_finished_spans()]
    print(json.dumps({"spans": spans, **(extra or {})}))
"""


def run(site, server, body, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH"), site) if p])
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code, server.uri, *args], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def named(out, name):
    return [s for s in out["spans"] if s["name"] == name]


def test_acquire_and_hold_spans_of_a_waiter(otel_site, server):
    """A waiter's acquire span lasts its wait, under the caller's span; its
    hold span runs from the grant to the release; a busy try says busy."""
    out = run(otel_site, server, """
        a, b = redlockc.Client(uri), redlockc.Client(uri)
        holder = a.lock("traced", owner=1)
        holder.acquire()
        assert b.lock("traced", owner=2).acquire(blocking=False) is False
        threading.Timer(0.2, holder.release).start()
        with tracer.start_as_current_span("request"):
            waiter = b.lock("traced", owner=2)
            assert waiter.acquire(timeout=10)
            time.sleep(0.05)
            waiter.release()
        a.close(); b.close()
        dump()
    """)
    acquires = named(out, "redlock.acquire")
    results = sorted(s["attributes"]["redlock.result"] for s in acquires)
    assert results == ["acquired", "acquired", "busy"], acquires
    request = named(out, "request")[0]
    waited = [s for s in acquires if s["parent"] == request["id"]]
    assert len(waited) == 1 and waited[0]["attributes"]["redlock.lock"] == "traced", acquires
    assert waited[0]["seconds"] >= 0.1, f"the acquire span lasts the wait: {waited}"
    holds = named(out, "redlock.hold")
    assert len(holds) == 2, f"the holder's and the waiter's: {holds}"
    mine = [s for s in holds if s["parent"] == request["id"]]
    assert len(mine) == 1 and mine[0]["status"] == "UNSET", holds
    assert mine[0]["seconds"] >= 0.04, f"from the grant to the release: {mine}"


def test_a_lost_hold_ends_its_span_in_error(otel_site, server):
    out = run(otel_site, server, """
        import redis
        c = redlockc.Client(uri, watchdog_timeout=0.6)
        lock = c.lock("gone", owner=1)
        lock.acquire()
        redis.Redis.from_url(uri).delete("gone")
        deadline = time.monotonic() + 5
        while lock.owned() and time.monotonic() < deadline:
            time.sleep(0.01)
        deadline = time.monotonic() + 5
        while not [s for s in exporter.get_finished_spans() if s.name == "redlock.hold"] \\
                and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            lock.release()
        except redlockc.LockLostError:
            pass
        c.close()
        dump()
    """)
    holds = named(out, "redlock.hold")
    assert len(holds) == 1, f"one span, ended once: {holds}"
    assert holds[0]["status"] == "ERROR" and "exception" in holds[0]["events"], holds


def test_asyncio_spans(otel_site, server):
    out = run(otel_site, server, """
        import asyncio

        async def main():
            async with redlockc.asyncio.Client(uri) as c:
                with tracer.start_as_current_span("job"):
                    lock = c.lock("aio-traced")
                    async with lock:
                        await asyncio.sleep(0.02)

        asyncio.run(main())
        dump()
    """)
    job = named(out, "job")[0]
    acquires, holds = named(out, "redlock.acquire"), named(out, "redlock.hold")
    assert [s["parent"] for s in acquires] == [job["id"]], out
    assert acquires[0]["attributes"] == {"redlock.lock": "aio-traced",
                                         "redlock.result": "acquired"}, acquires
    assert [s["parent"] for s in holds] == [job["id"]], out
    assert holds[0]["seconds"] >= 0.015, holds


def test_without_an_sdk_nothing_is_recorded(otel_site, server):
    """The API alone, no tracer provider: no span is made (not even a
    non-recording one), and the locks work as ever."""
    out = run(otel_site, server, """
        from redlockc import _otel
        c = redlockc.Client(uri)
        with c.lock("untraced", owner=1):
            pass
        span = _otel.acquire_started("x")
        dump({"made": span is not None})
        c.close()
    """, "--no-sdk")
    assert out == {"spans": [], "made": False}, out
