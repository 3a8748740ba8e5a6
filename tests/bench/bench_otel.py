#!/usr/bin/python3
"""bench_otel.py - what the OpenTelemetry spans cost the Python binding, in one run.

    PYTHONPATH=<dir with opentelemetry-api and -sdk> \\
        /usr/bin/python3 tests/bench/bench_otel.py [--seconds N] [--rounds R]

acquire()+release() cycles per second on one thread, one uncontended name,
against one redis-server it starts itself, in three modes that take turns
in rounds (so that noise from elsewhere hits all three):
  no-api    the binding as without opentelemetry-api installed (no spans)
  api       opentelemetry-api without a tracer provider set up (no SDK)
  sdk       the SDK's TracerProvider with a SimpleSpanProcessor into an
            InMemorySpanExporter (cleared each round): two spans per cycle
            (redlock.acquire, redlock.hold) made, ended and exported
Prints one line per mode: the median cycles/s over the rounds and its ratio
to no-api. It never fails on speed. The module: from PYTHONPATH, else
RLC_BUILD_DIR (default ./build) of a build made with -DRLC_PYTHON=ON;
opentelemetry from PYTHONPATH (pip install --target DIR opentelemetry-sdk).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # redis_servers

try:
    import redlockc
except ImportError:
    build = os.environ.get("RLC_BUILD_DIR", os.path.join(ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "bindings", "python"))
    import redlockc

from redlockc import _otel  # noqa: E402
from redis_servers import RedisServer  # noqa: E402

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:
    sys.exit("bench_otel.py needs opentelemetry-api and opentelemetry-sdk on PYTHONPATH")


def cycles_per_second(lock, seconds):
    n, end = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        lock.acquire()
        lock.release()
        n += 1
    return n / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.0, help="per mode and round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # mode -> (the binding's tracer, whether a provider is set up): the SDK's
    # provider is not made global, so that the api mode stays without one.
    tracers = {"no-api": (None, False),
               "api": (trace.get_tracer("redlockc"), False),  # the API's no-op proxy
               "sdk": (provider.get_tracer("redlockc"), True)}
    server = RedisServer().start()
    try:
        client = redlockc.Client(server.uri)
        lock = client.lock("bench-otel", owner=1)
        cycles_per_second(lock, 0.3)  # warm up (connections, scripts)
        rates = {mode: [] for mode in tracers}
        for _ in range(args.rounds):
            for mode, (tracer, live) in tracers.items():
                _otel._tracer, _otel._live = tracer, live
                rates[mode].append(cycles_per_second(lock, args.seconds))
                exporter.clear()
        client.close()
    finally:
        server.stop()
    base = statistics.median(rates["no-api"])
    print(f"{'mode':8} {'cycles/s':>10} {'vs no-api':>10}  (median of {args.rounds} rounds of "
          f"{args.seconds:g} s, 1 thread)")
    for mode, r in rates.items():
        med = statistics.median(r)
        print(f"{mode:8} {med:10.0f} {med / base:10.3f}")


if __name__ == "__main__":
    main()
