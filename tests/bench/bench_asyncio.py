#!/usr/bin/python3
"""bench_asyncio.py - redlockc.asyncio against redis-py's redis.asyncio Lock, in one run.

    /usr/bin/python3 tests/bench/bench_asyncio.py [--seconds N] [--waiters N] [--locks N]

Measures, against the same redis-server and in the same minute:
  cycles/s   await acquire() + await release() per second, 1 task and 64 tasks
             on distinct lock names (one client per implementation, shared by
             its tasks), per-cycle p50/p99; the two take turns in rounds so
             that noise from elsewhere on the machine hits both; beside them
             the floor: a bare asyncio Protocol sending the library's own two
             scripts (captured with MONITOR), what any asyncio client pays;
  waiters    --waiters (10,000) tasks waiting at once on --locks (100) names,
             each taking its lock once (held over one loop iteration):
             whether all complete, in how long, the memory per waiting task
             (Python heap by tracemalloc, and RSS), and the hand-off latency
             from a holder's release() to the next holder's acquire()
             returning, p50/p99. redis-py polls every 0.1 s (its default) over
             a BlockingConnectionPool of 64 connections (unbounded, its
             10,000 pollers would open 10,000 sockets); its run is capped.

Prints one JSON object per line, then a table. Never fails on speed. The
server: RLC_BENCH_NODE, else one it starts itself. The module: from
PYTHONPATH, else RLC_BUILD_DIR (default ./build) built with -DRLC_PYTHON=ON.
"""
import argparse
import asyncio
import gc
import json
import os
import resource
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))  # redis_servers

try:
    import redlockc.asyncio as rlc_aio
except ImportError:
    build = os.environ.get("RLC_BUILD_DIR", os.path.join(ROOT, "build"))
    sys.path.insert(0, os.path.join(build, "bindings", "python"))
    import redlockc.asyncio as rlc_aio

import redis.asyncio as redis_aio  # noqa: E402

from redis_servers import RedisServer  # noqa: E402

MAX_SAMPLES = 200_000


def emit(row, **fields):
    print(json.dumps({"row": row, **fields}), flush=True)
    return fields


def cpu_seconds():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def quantile_us(samples_ns, q):
    if not samples_ns:
        return None
    s = sorted(samples_ns)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000


# ---- implementations ---------------------------------------------------------------

class Ours:
    name = "redlockc"

    def __init__(self, uri):
        self.client = rlc_aio.Client(uri)

    def lock(self, name):
        return self.client.lock(name)  # watchdog lease, renewed on the loop

    async def acquire(self, lock, timeout=None):
        return await lock.acquire(timeout=timeout)

    async def close(self):
        await self.client.close()


class Floor:
    """What any asyncio client pays for our lock cycle: a bare asyncio.Protocol
    that sends the two EVALSHA commands the library sends (captured off the
    wire with MONITOR, as tests/bench/capture.c does for C) and awaits each
    reply; no lock logic, no engine. Commands are formatted inside the cycle,
    a new attempt id each time, and every reply is checked (granted: 1,
    freed: 0). Pipelined on one connection like ours: replies come in order."""

    name = "floor"
    CAPTURE = "bench:aio:capture"

    def __init__(self, uri, acquire_args, release_args):
        self.uri = uri
        self.acq, self.rel = acquire_args, release_args
        self.client_id = acquire_args[-2].rsplit(":", 1)[0]  # "<uuid>" of "<uuid>:<hex>"
        self.transport = None
        self.pending = []  # futures, in the order their replies will come
        self.buf = b""
        self.seq = 0x100000

    @classmethod
    async def capture(cls, uri, ours):
        """Runs one acquire + release of `ours` under MONITOR and keeps the two
        EVALSHA commands; None if they were not seen."""
        host, port = uri.split("//", 1)[1].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"MONITOR\r\n")
        await reader.readline()  # +OK
        lock = ours.lock(cls.CAPTURE)
        await ours.acquire(lock)
        await lock.release()
        seen = []
        try:
            while len(seen) < 2:
                line = (await asyncio.wait_for(reader.readline(), 5)).decode()
                args = cls._monitor_args(line)
                if args and args[0].upper() == "EVALSHA" and cls.CAPTURE in " ".join(args):
                    seen.append(args[1:])
        except asyncio.TimeoutError:
            pass
        writer.close()
        if len(seen) < 2:
            return None
        return cls(uri, seen[0], seen[1])

    @staticmethod
    def _monitor_args(line):
        """The quoted arguments of a MONITOR line (sdscatrepr escapes)."""
        at = line.find("] ")
        if at < 0:
            return None
        out, i, n = [], at + 2, len(line)
        while i < n:
            if line[i] != '"':
                i += 1
                continue
            i += 1
            cur = []
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n:
                    c = line[i + 1]
                    if c == "x":
                        cur.append(chr(int(line[i + 2:i + 4], 16)))
                        i += 4
                        continue
                    cur.append({"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}.get(c, c))
                    i += 2
                    continue
                cur.append(line[i])
                i += 1
            out.append("".join(cur))
            i += 1
        return out

    def _command(self, template, name, attempt_id, upto):
        # EVALSHA sha nkeys keys... lease field attempt (outer | upto)
        args = ["EVALSHA"] + [a.replace(self.CAPTURE, name) for a in template]
        nkeys = int(args[2])
        args[3 + nkeys + 2] = attempt_id
        args[3 + nkeys + 3] = upto
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    async def _connect(self):
        host, port = self.uri.split("//", 1)[1].rsplit(":", 1)
        floor = self

        class Proto(asyncio.Protocol):
            def data_received(self, data):
                floor._received(data)

            def connection_lost(self, exc):
                for f in floor.pending:
                    if not f.done():
                        f.set_exception(ConnectionError("floor: connection lost"))
                floor.pending.clear()

        self.transport, _ = await asyncio.get_running_loop().create_connection(
            Proto, host, int(port))

    def _received(self, data):
        self.buf += data
        while self.pending:
            end, value = _resp_parse(self.buf, 0)
            if end < 0:
                return
            self.buf = self.buf[end:]
            fut = self.pending.pop(0)
            if not fut.done():
                fut.set_result(value)

    async def _call(self, cmd):
        if self.transport is None:
            await self._connect()
        fut = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        self.transport.write(cmd)
        return await fut

    def lock(self, name):
        return _FloorLock(self, name)

    async def acquire(self, lock, timeout=None):
        self.seq += 1
        lock.attempt = f"{self.client_id}:{self.seq:x}"
        r = await self._call(self._command(self.acq, lock.name, lock.attempt, ""))
        if not (isinstance(r, list) and r and r[0] == 1):
            raise RuntimeError(f"floor: acquire answered {r!r}")
        return True

    async def close(self):
        if self.transport is not None:
            self.transport.close()


class _FloorLock:
    __slots__ = ("floor", "name", "attempt")

    def __init__(self, floor, name):
        self.floor, self.name, self.attempt = floor, name, None

    async def release(self):
        f = self.floor
        r = await f._call(f._command(f.rel, self.name, self.attempt, ""))
        if r != 0:
            raise RuntimeError(f"floor: release answered {r!r}")


def _resp_parse(buf, i):
    """(end, value) of the RESP value at buf[i:], or (-1, None) if incomplete."""
    nl = buf.find(b"\r\n", i)
    if nl < 0:
        return -1, None
    kind, line = buf[i:i + 1], buf[i + 1:nl]
    if kind == b":":
        return nl + 2, int(line)
    if kind in (b"+", b"-"):
        return nl + 2, line.decode()
    if kind == b"$":
        n = int(line)
        if n < 0:
            return nl + 2, None
        end = nl + 2 + n + 2
        return (end, buf[nl + 2:end - 2]) if len(buf) >= end else (-1, None)
    if kind == b"*":
        out, j = [], nl + 2
        for _ in range(int(line)):
            j, v = _resp_parse(buf, j)
            if j < 0:
                return -1, None
            out.append(v)
        return j, out
    raise RuntimeError(f"floor: not RESP: {buf[i:i + 40]!r}")


class RedisPy:
    name = "redispy"

    def __init__(self, uri, pool=None):
        if pool:
            self.redis = redis_aio.Redis(connection_pool=redis_aio.BlockingConnectionPool.from_url(
                uri, max_connections=pool, timeout=None))
        else:
            self.redis = redis_aio.Redis.from_url(uri)

    def lock(self, name):
        # 30 s lease like our watchdog's; redis-py's defaults otherwise
        # (polling every 0.1 s while it waits).
        return self.redis.lock(name, timeout=30)

    async def acquire(self, lock, timeout=None):
        return await lock.acquire(blocking_timeout=timeout)

    async def close(self):
        await self.redis.close()
        await self.redis.connection_pool.disconnect()


# ---- cycles ------------------------------------------------------------------------

async def run_slice(impl, locks, seconds, acc):
    end = time.perf_counter_ns() + int(seconds * 1e9)
    room = MAX_SAMPLES // len(locks)

    async def worker(lock):
        lat, count, errors = [], 0, 0
        now = time.perf_counter_ns()
        began = now
        while now < end:
            try:
                await impl.acquire(lock)
                await lock.release()
                count += 1
            except Exception as e:  # counted: a broken run shows as errors, not speed
                errors += 1
                if errors == 1:
                    print(f"{impl.name}: {e!r}", file=sys.stderr, flush=True)
                if errors > 1000:
                    break
            t = time.perf_counter_ns()
            if len(lat) < room:
                lat.append(t - now)
            now = t
        return count, errors, lat, began, now

    cpu0 = cpu_seconds()
    results = await asyncio.gather(*(worker(lk) for lk in locks))
    acc["cpu_s"] += cpu_seconds() - cpu0
    wall = max(r[4] for r in results) - min(r[3] for r in results)
    acc["count"] += sum(r[0] for r in results)
    acc["errors"] += sum(r[1] for r in results)
    acc["wall_ns"] += wall
    acc["lat"] += [x for r in results for x in r[2]]
    acc["rounds"].append(sum(r[0] for r in results) / (wall / 1e9))


async def cycles(impls, tasks, seconds, rounds=6):
    locks = {impl.name: [impl.lock(f"bench:aio:{impl.name}:t{tasks}:{i}") for i in range(tasks)]
             for impl in impls}
    acc = {impl.name: {"count": 0, "errors": 0, "wall_ns": 0, "cpu_s": 0.0, "lat": [],
                       "rounds": []} for impl in impls}
    for impl in impls:  # connect outside the measured rounds
        await run_slice(impl, locks[impl.name][:1], 0.05, {"count": 0, "errors": 0, "wall_ns": 0,
                                                           "cpu_s": 0.0, "lat": [], "rounds": []})
    for r in range(rounds):
        for impl in (impls if r % 2 == 0 else impls[::-1]):
            await run_slice(impl, locks[impl.name], seconds / rounds, acc[impl.name])
    out = {}
    for impl in impls:
        a = acc[impl.name]
        out[impl.name] = emit(
            f"aio.{impl.name}.t{tasks}", tasks=tasks, cycles=a["count"] / (a["wall_ns"] / 1e9),
            p50_us=quantile_us(a["lat"], 0.5), p99_us=quantile_us(a["lat"], 0.99),
            client_cpu_pct=100 * a["cpu_s"] / (a["wall_ns"] / 1e9), errors=a["errors"],
            round_min=min(a["rounds"]), round_max=max(a["rounds"]))
    return out


# ---- many waiters ---------------------------------------------------------------------

async def waiters(impl, n, nlocks, cap_s):
    """n tasks on nlocks names, all waiting at once behind a holder per name."""
    names = [f"bench:aio:{impl.name}:w{i}" for i in range(nlocks)]
    holders = [impl.lock(nm) for nm in names]
    for h in holders:
        await impl.acquire(h)
    released = {}
    samples, done, errors = [], [0], [0]
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    heap0 = tracemalloc.get_traced_memory()[0]

    async def waiter(i):
        nm = names[i % nlocks]
        lock = impl.lock(nm)
        try:
            if not await impl.acquire(lock, timeout=cap_s):
                errors[0] += 1
                return
        except Exception as e:
            errors[0] += 1
            if errors[0] == 1:
                print(f"{impl.name} waiters: {e!r}", file=sys.stderr, flush=True)
            return
        t = time.perf_counter_ns()
        r = released.pop(nm, None)
        if r is not None and len(samples) < MAX_SAMPLES:
            samples.append(t - r)
        await asyncio.sleep(0)  # held over one loop iteration
        released[nm] = time.perf_counter_ns()
        await lock.release()
        done[0] += 1

    tasks = [asyncio.ensure_future(waiter(i)) for i in range(n)]
    await asyncio.sleep(1.0)  # every task started and sent its first attempt
    heap = tracemalloc.get_traced_memory()[0] - heap0
    tracemalloc.stop()
    rss = rss_bytes() - rss0
    t0 = time.perf_counter()
    cpu0 = cpu_seconds()
    for nm, h in zip(names, holders):
        released[nm] = time.perf_counter_ns()
        await h.release()
    finished = await asyncio.wait(tasks, timeout=cap_s)
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    for t in finished[1]:
        t.cancel()
    if finished[1]:
        await asyncio.wait(finished[1], timeout=10)
    return emit(f"aio.{impl.name}.waiters", waiters=n, locks=nlocks, completed=done[0],
                errors=errors[0], seconds=wall, capped=bool(finished[1]),
                heap_per_waiter=heap / n, rss_per_waiter=rss / n,
                handoff_p50_us=quantile_us(samples, 0.5),
                handoff_p99_us=quantile_us(samples, 0.99), client_cpu_pct=100 * cpu / wall)


# ---- the table ----------------------------------------------------------------------

def fmt(v, unit="", digits=0):
    return "-" if v is None else f"{v:,.{digits}f}{unit}"


def table(rows, tasks_list):
    def get(row, key):
        return rows.get(row, {}).get(key)

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "-"

    print()
    print("redlockc.asyncio vs redis-py's redis.asyncio Lock (same server, same run)")
    print(f"{'workload':<28}{'redlockc':>14}{'redis-py':>14}{'ratio':>9}   target")
    for t in tasks_list:
        us, peer = get(f"aio.redlockc.t{t}", "cycles"), get(f"aio.redispy.t{t}", "cycles")
        print(f"{f'cycles/s, {t} task(s)':<28}{fmt(us):>14}{fmt(peer):>14}{ratio(us, peer):>9}"
              f"   >= 1.5x redis-py")
        floor = get(f"aio.floor.t{t}", "cycles")
        if floor:
            # The ceiling of any asyncio client sending our two scripts.
            print(f"{'  floor: bare asyncio':<28}{fmt(floor):>14}{'':>14}{ratio(floor, peer):>9}"
                  f"   (redlockc at {ratio(us, floor)} of it)")
        for key, label in (("p50_us", "p50 us"), ("p99_us", "p99 us")):
            print(f"{f'  cycle {label}':<28}{fmt(get(f'aio.redlockc.t{t}', key)):>14}"
                  f"{fmt(get(f'aio.redispy.t{t}', key)):>14}")
        print(f"{'  client CPU %':<28}{fmt(get(f'aio.redlockc.t{t}', 'client_cpu_pct')):>14}"
              f"{fmt(get(f'aio.redispy.t{t}', 'client_cpu_pct')):>14}")
    us, peer = rows.get("aio.redlockc.waiters", {}), rows.get("aio.redispy.waiters", {})
    if us or peer:
        n = us.get("waiters") or peer.get("waiters")
        print(f"{n:,} waiters on {us.get('locks') or peer.get('locks')} locks:")
        for key, label, digits in (("completed", "completed", 0), ("errors", "errors", 0),
                                   ("seconds", "seconds to drain", 2),
                                   ("heap_per_waiter", "Python heap B/waiter", 0),
                                   ("rss_per_waiter", "RSS B/waiter", 0),
                                   ("handoff_p50_us", "hand-off p50 us", 0),
                                   ("handoff_p99_us", "hand-off p99 us", 0),
                                   ("client_cpu_pct", "client CPU %", 0)):
            a, b = us.get(key), peer.get(key)
            print(f"{'  ' + label:<28}{fmt(a, digits=digits):>14}{fmt(b, digits=digits):>14}")
        if peer.get("capped"):
            print("  (redis-py did not drain within the cap: its count is what completed)")
        print("  (redis-py: polls every 0.1 s, 64 pooled connections)")


async def main_async(args, uri):
    rows = {}
    ours = Ours(uri)
    impls = [ours, RedisPy(uri)]
    floor = await Floor.capture(uri, ours)
    if floor is None:
        print("floor: the library's two scripts were not seen under MONITOR; no floor row",
              file=sys.stderr, flush=True)
    else:
        impls.append(floor)
    tasks_list = (1, 64)
    try:
        for t in tasks_list:
            for name, row in (await cycles(impls, t, args.seconds)).items():
                rows[f"aio.{name}.t{t}"] = row
    finally:
        for impl in impls:
            await impl.close()
    if args.waiters:
        ours = Ours(uri)
        try:
            rows["aio.redlockc.waiters"] = await waiters(ours, args.waiters, args.locks, args.cap)
        finally:
            await ours.close()
        peer = RedisPy(uri, pool=64)
        try:
            rows["aio.redispy.waiters"] = await waiters(peer, args.waiters, args.locks, args.cap)
        finally:
            await peer.close()
    table(rows, tasks_list)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per cycles workload (default 3)")
    ap.add_argument("--waiters", type=int, default=10_000, help="waiting tasks (0: skip)")
    ap.add_argument("--locks", type=int, default=100, help="names they wait on (default 100)")
    ap.add_argument("--cap", type=float, default=60.0, help="seconds a waiters run may take")
    args = ap.parse_args()
    uri = os.environ.get("RLC_BENCH_NODE")
    own = None
    if not uri:
        own = RedisServer("--maxclients", "20000").start()
        uri = own.uri
    try:
        asyncio.run(main_async(args, uri))
    finally:
        if own:
            own.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
