#!/usr/bin/python3
"""bench_python.py - redlockc's Python binding against redis-py's Lock, in one run.

    /usr/bin/python3 tests/bench/bench_python.py [--seconds N] [--no-limit]

Measures, against the same redis-server and in the same minute:
  cycles/s  acquire()+release() per second on distinct lock names, 1 thread
            and 16 threads (one client per implementation, shared by its
            threads), with per-cycle latency p50/p99; the two take turns in
            rounds, so that noise from elsewhere on the machine hits both;
  hand-off  8 threads on one name: time from a holder's release() to another
            thread's acquire() returning (the rules of tests/bench/handoff.c:
            each holder holds 1 ms, and a releaser waits until someone else
            took the lock, so every hand-off goes to a thread that waited);
  pool4     (information) the 16 threads again over pool_size=4 connections:
            row py.redlockc_pool4.t16;
  limit     (standalone only) what redis-benchmark gets from the very same
            scripts, captured from the library with MONITOR: cycles/s =
            1/(1/acquire_rps + 1/release_rps) on 1 and 16 connections.

It prints one JSON object per line (rows for tests/bench's driver, which
merges them into its table) and then a table. It never fails on speed.
The server: RLC_BENCH_NODE (set by the driver), else one it starts itself.
The module: from PYTHONPATH, else RLC_BUILD_DIR (default ./build) of a
build made with -DRLC_PYTHON=ON.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
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

import redis  # noqa: E402

from redis_servers import RedisServer  # noqa: E402

THREADS = 16
HANDOFF_THREADS = 8
HOLD_S = 0.001
PATIENCE_S = 2.0
MAX_SAMPLES = 200_000  # per thread; past it, cycles are only counted


def emit(row, **fields):
    print(json.dumps({"row": row, **fields}), flush=True)
    return fields


def cpu_seconds():
    """CPU time of this process (all threads: the library's own included)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def quantile_us(samples_ns, q):
    if not samples_ns:
        return None
    s = sorted(samples_ns)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


# ---- implementations: one object per thread with acquire() and release() --------

class Ours:
    name = "redlockc"

    def __init__(self, uri, **options):
        self.client = redlockc.Client(uri, **options)
        if options:  # a variant: its own row name, e.g. py.redlockc_pool4.t16 (no target)
            self.name += "_" + "_".join(f"{k.split('_')[0]}{v}" for k, v in options.items())

    def lock(self, name):
        return self.client.lock(name)  # watchdog lease: the library's default

    def close(self):
        self.client.close()


class RedisPy:
    name = "redispy"

    def __init__(self, uri):
        # One pool shared by the threads, as an application would have it.
        self.redis = redis.Redis.from_url(uri, max_connections=64)

    def lock(self, name):
        # A 30 s lease like our watchdog's first lease; redis-py's defaults
        # otherwise (blocking, polling every 0.1 s while it waits).
        return self.redis.lock(name, timeout=30)

    def close(self):
        self.redis.close()


# ---- workloads ---------------------------------------------------------------------

def run_slice(impl, locks, seconds, acc):
    """All `locks` (one per thread) cycle for `seconds`; adds to acc."""
    start = threading.Barrier(len(locks) + 1)
    results = [None] * len(locks)

    def worker(i):
        lock, lat, count, errors = locks[i], [], 0, 0
        room = MAX_SAMPLES // len(locks) - len(acc["lat"]) // len(locks)
        start.wait()
        began = now = time.perf_counter_ns()
        end = began + int(seconds * 1e9)
        while now < end:
            try:
                lock.acquire()
                lock.release()
                count += 1
            except Exception as e:  # counted; a broken run shows as errors, not speed
                errors += 1
                if errors == 1:
                    print(f"{impl.name}: {e!r}", file=sys.stderr, flush=True)
                if errors > 1000:
                    break
            t = time.perf_counter_ns()
            if len(lat) < room:
                lat.append(t - now)
            now = t
        results[i] = (count, errors, lat, began, now)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(locks))]
    for t in ts:
        t.start()
    cpu0 = cpu_seconds()
    start.wait()
    for t in ts:
        t.join()
    acc["cpu_s"] += cpu_seconds() - cpu0  # this process: only `impl` ran meanwhile
    acc["count"] += sum(r[0] for r in results)
    acc["errors"] += sum(r[1] for r in results)
    acc["wall_ns"] += max(r[4] for r in results) - min(r[3] for r in results)
    acc["lat"] += [x for r in results for x in r[2]]
    acc["rounds"].append(sum(r[0] for r in results) /
                         ((max(r[4] for r in results) - min(r[3] for r in results)) / 1e9))


def cycles(impls, threads, seconds, rounds=6):
    """Uncontended acquire+release cycles per second on `threads` distinct names.

    The implementations take turns in short rounds (alternating who goes
    first), so that a noisy neighbour on the machine hits both alike.
    """
    locks = {impl.name: [impl.lock(f"bench:py:{impl.name}:t{threads}:{i}")
                         for i in range(threads)] for impl in impls}
    acc = {impl.name: {"count": 0, "errors": 0, "wall_ns": 0, "cpu_s": 0.0, "lat": [],
                       "rounds": []}
           for impl in impls}
    for r in range(rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            run_slice(impl, locks[impl.name], seconds / rounds, acc[impl.name])
    out = {}
    for impl in impls:
        a = acc[impl.name]
        out[impl.name] = emit(
            f"py.{impl.name}.t{threads}", threads=threads,
            cycles=a["count"] / (a["wall_ns"] / 1e9), p50_us=quantile_us(a["lat"], 0.5),
            p99_us=quantile_us(a["lat"], 0.99),
            client_cpu_pct=100 * a["cpu_s"] / (a["wall_ns"] / 1e9), errors=a["errors"],
            rounds=rounds,
            round_min=min(a["rounds"]), round_max=max(a["rounds"]))
    return out


def handoff(impl, threads, seconds):
    """Contended: hand-off latency from release() to the next holder's acquire()."""
    cond = threading.Condition()
    state = {"holder": None, "released": 0, "samples": [], "timeouts": 0, "errors": 0}
    end = time.perf_counter_ns() + int(seconds * 1e9)

    def worker(me):
        lock = impl.lock(f"bench:py:{impl.name}:handoff")
        for _ in range(10**9):
            if time.perf_counter_ns() >= end:
                return
            try:
                got = lock.acquire(timeout=5) if impl.name == "redlockc" else \
                    lock.acquire(blocking_timeout=5)
            except Exception as e:
                if state["errors"] == 0:
                    print(f"{impl.name} hand-off: {e!r}", file=sys.stderr, flush=True)
                got = False
            now = time.perf_counter_ns()
            if not got:
                with cond:
                    state["errors"] += 1
                    if state["errors"] > 1000:
                        return
                continue
            with cond:
                if state["holder"] not in (None, me) and now < end:
                    state["samples"].append(now - state["released"])
                state["holder"] = me
                cond.notify_all()
            time.sleep(HOLD_S)
            with cond:
                state["released"] = time.perf_counter_ns()  # before: the next may win first
            lock.release()
            with cond:  # let a waiter take it before we try again
                left = min(PATIENCE_S, (end - time.perf_counter_ns()) / 1e9)
                if left > 0 and not cond.wait_for(lambda: state["holder"] != me, left):
                    state["timeouts"] += left == PATIENCE_S

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter_ns()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    s = state["samples"]
    return emit(f"py.{impl.name}.handoff", threads=threads,
                cycles=len(s) / ((end - t0) / 1e9), handoff_p50_us=quantile_us(s, 0.5),
                handoff_p99_us=quantile_us(s, 0.99), errors=state["errors"],
                patience_timeouts=state["timeouts"])


# ---- the limit: redis-benchmark running the library's own commands --------------

_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def capture(uri):
    """The acquire and release EVALSHA commands the library sends, via MONITOR."""
    name = "benchcapture"
    raw = redis.Redis.from_url(uri)
    found = {}
    with raw.monitor() as mon:
        with redlockc.Client(uri) as client:
            lock = client.lock(name)
            lock.acquire()
            lock.release()
        for _ in range(100):  # MONITOR lines of this session, bounded
            line = mon.connection.read_response()
            line = line.decode() if isinstance(line, bytes) else line
            args = [bytes(a, "utf-8").decode("unicode_escape") for a in _QUOTED.findall(line)]
            if args and args[0].upper() == "EVALSHA":
                found["release" if "acquire" in found else "acquire"] = args
                if len(found) == 2:
                    break
    raw.close()
    if len(found) != 2:
        raise RuntimeError("could not capture the library's commands with MONITOR")
    return name, found["acquire"], found["release"]


def redis_benchmark(port, conns, requests, keyspace, args):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", str(conns), "-n",
                          str(requests), "-r", str(keyspace), "--csv", *args],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    row = out.strip().splitlines()[-1].split('","')
    return float(row[1].strip('"'))


def limit(uri, port, conns, seconds):
    name, acq, rel = capture(uri)
    # Only the key varies (redis-benchmark gives each placeholder its own
    # random value); channel and token key keep the captured name.
    nkeys = int(acq[2])
    key_at = 3  # EVALSHA sha numkeys KEY ...
    rand = f"bench:limit:{conns}:__rand_int__"
    acq, rel = list(acq), list(rel)
    acq[key_at] = rel[key_at] = rand
    assert nkeys >= 1 and acq[key_at] == rand
    r = redis.Redis.from_url(uri)
    n = max(2000, int(seconds * (3000 if conns == 1 else 12000)))
    acq_rps = redis_benchmark(port, conns, n, 10**11, acq)  # fresh names: new holds
    # Names held beforehand (8x more than calls), as the hold the acquire made.
    field = acq[-1]
    held = n * 8
    pipe = r.pipeline(transaction=False)
    for i in range(held):
        key = f"bench:limit:{conns}:{i:012d}"
        pipe.hset(key, field, 1)
        pipe.pexpire(key, 60000)
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    rel_rps = redis_benchmark(port, conns, n, held, rel)
    r.flushall()
    r.close()
    return emit(f"py.limit.c{conns}", conns=conns, cycles=1 / (1 / acq_rps + 1 / rel_rps),
                acquire_rps=acq_rps, release_rps=rel_rps)


# ---- the table ---------------------------------------------------------------------

def fmt(v, unit=""):
    return "-" if v is None else f"{v:,.0f}{unit}"


def table(rows):
    def get(row, key):
        return rows.get(row, {}).get(key)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    print()
    print("redlockc (Python) vs redis-py Lock; cycles/s = acquire+release per second")
    print(f"{'workload':<22}{'limit':>10}{'redlockc':>12}{'redis-py':>12}{'us/redis-py':>13}"
          f"{'us/limit':>10}   target")
    for t, need in ((1, 1.0), (THREADS, 5.0)):
        us, peer = get(f"py.redlockc.t{t}", "cycles"), get(f"py.redispy.t{t}", "cycles")
        lim = get(f"py.limit.c{t}", "cycles")
        print(f"{f'cycles, {t} thread(s)':<22}{fmt(lim):>10}{fmt(us):>12}{fmt(peer):>12}"
              f"{ratio(us, peer):>13}{ratio(us, lim):>10}   >= {need:g}x redis-py")
    us, peer = get("py.redlockc_pool4.t16", "cycles"), get(f"py.redispy.t{THREADS}", "cycles")
    print(f"{f'  same, pool_size=4':<22}{'':>10}{fmt(us):>12}{'':>12}{ratio(us, peer):>13}"
          f"{ratio(us, get(f'py.limit.c{THREADS}', 'cycles')):>10}   (info)")
    for key, label in (("p50_us", "cycle p50 us"), ("p99_us", "cycle p99 us")):
        for t in (1, THREADS):
            print(f"{f'{label}, {t}t':<22}{'':>10}{fmt(get(f'py.redlockc.t{t}', key)):>12}"
                  f"{fmt(get(f'py.redispy.t{t}', key)):>12}")
    for key, label in (("handoff_p50_us", "hand-off p50 us"),
                       ("handoff_p99_us", "hand-off p99 us")):
        print(f"{label:<22}{'':>10}{fmt(get('py.redlockc.handoff', key)):>12}"
              f"{fmt(get('py.redispy.handoff', key)):>12}")
    print(f"{'hand-offs/s':<22}{'':>10}{fmt(get('py.redlockc.handoff', 'cycles')):>12}"
          f"{fmt(get('py.redispy.handoff', 'cycles')):>12}")
    print(f"({HANDOFF_THREADS} threads on one name; redis-py's Lock polls every 0.1 s "
          f"while it waits, its default)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per workload (default 3)")
    ap.add_argument("--no-limit", action="store_true", help="skip the redis-benchmark limit")
    args = ap.parse_args()

    uri = os.environ.get("RLC_BENCH_NODE")
    own = None
    if not uri:
        own = RedisServer().start()
        uri = own.uri
    port = int(uri.rsplit(":", 1)[1].split("/")[0])
    rows = {}
    try:
        # Under the driver the limit is its own (limit.c1, limit.c16).
        if not args.no_limit and not os.environ.get("RLC_BENCH_NODE") \
                and shutil.which("redis-benchmark"):
            for conns in (1, THREADS):
                rows[f"py.limit.c{conns}"] = limit(uri, port, conns, args.seconds)
        impls = [Ours(uri), RedisPy(uri)]
        # Also (information, not a target): 16 threads over 4 pipelined
        # connections instead of the default one.
        pool4 = Ours(uri, pool_size=4)
        for threads, racing in ((1, impls), (THREADS, impls + [pool4])):
            for name, row in cycles(racing, threads, args.seconds).items():
                rows[f"py.{name}.t{threads}"] = row
        pool4.close()
        for impl in impls:
            rows[f"py.{impl.name}.handoff"] = handoff(impl, HANDOFF_THREADS, args.seconds)
        for impl in impls:
            impl.close()
    finally:
        if own:
            if own.proc and own.proc.poll() is not None:  # say why every figure broke
                log = os.path.join(own.dir, "redis.log")
                tail = open(log).read()[-2000:] if os.path.exists(log) else "(no log)"
                print(f"redis-server exited during the run (status {own.proc.returncode}):\n"
                      f"{tail}", file=sys.stderr)
            own.stop()
    table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
