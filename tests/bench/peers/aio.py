#!/usr/bin/python3
"""aio.py - redlockc.asyncio and redis-py's redis.asyncio Lock on rlc_bench's workloads.

    python3 aio.py --node redis://h:p --seconds S [--impl redlockc|redispy]
                   [--workloads t1,t16,handoff] [--cycles N]

Rows (one JSON object per line), <impl> = redlockc or redispy:
  aio.<impl>.t1       1 task: await acquire() + await release() cycles
  aio.<impl>.t16      16 tasks on distinct names, one client
  aio.<impl>.handoff  8 tasks on one name: a holder's release() to the next
                      holder's acquire() returning (rules of handoff.c: each
                      holder holds 1 ms, a releaser waits until another took it)
  aio.<impl>.cost     exactly --cycles cycles on one name (peers.py reads the
                      server around it)
redis-py: a 30 s lease and its defaults (polling every 0.1 s while it waits),
as in tests/bench/bench_asyncio.py. redlockc: the watchdog lease, the default.
It never judges speed.
"""
import argparse
import asyncio
import json
import resource
import sys
import time

WARMUP = 200
HOLD_S = 0.001
PATIENCE_S = 2.0
MAX_SAMPLES = 1 << 20


def emit(row, **fields):
    print(json.dumps({"row": row, **fields}), flush=True)


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def q_us(v, q):
    if not v:
        return -1
    v.sort()
    return v[min(len(v) - 1, round(q * (len(v) - 1)))] / 1000


class Ours:
    def __init__(self, uri):
        import redlockc.asyncio as rlc_aio
        self.client = rlc_aio.Client(uri)

    def lock(self, name):
        return self.client.lock(name)

    async def acquire(self, lock, timeout):
        return await lock.acquire(timeout=timeout)

    async def close(self):
        await self.client.close()


class RedisPy:
    def __init__(self, uri):
        import redis.asyncio as redis_aio
        self.redis = redis_aio.Redis.from_url(uri)

    def lock(self, name):
        return self.redis.lock(name, timeout=30)

    async def acquire(self, lock, timeout):
        return await lock.acquire(blocking_timeout=timeout)

    async def close(self):
        await self.redis.aclose() if hasattr(self.redis, "aclose") else await self.redis.close()


async def cycle(impl, name):
    lock = impl.lock(name)
    if not await impl.acquire(lock, 5):
        raise TimeoutError(f"{name} stayed busy for 5 s")
    await lock.release()


async def cycles(impl, row, tasks, seconds):
    for t in range(tasks):
        for _ in range(WARMUP):
            await cycle(impl, f"bench:{row}:{t}")
    lat, errors = [], [0]
    count = [0]
    cpu0, t0 = cpu_s(), time.perf_counter_ns()
    end = t0 + int(seconds * 1e9)

    async def worker(name):
        a = time.perf_counter_ns()
        while a < end and errors[0] < 1000:
            try:
                await cycle(impl, name)
            except Exception as e:  # noqa: BLE001 - counted, first one logged
                if errors[0] == 0:
                    print(f"{row}: {e!r}", file=sys.stderr)
                errors[0] += 1
                a = time.perf_counter_ns()
                continue
            b = time.perf_counter_ns()
            count[0] += 1
            if len(lat) < MAX_SAMPLES:
                lat.append(b - a)
            a = b

    await asyncio.gather(*(worker(f"bench:{row}:{t}") for t in range(tasks)))
    wall = (time.perf_counter_ns() - t0) / 1e9
    emit(row, threads=tasks, nodes=1, cycles=count[0] / wall, p50_us=q_us(lat, 0.5),
         p90_us=q_us(lat, 0.9), p99_us=q_us(lat, 0.99), errors=errors[0],
         client_cpu_pct=100 * (cpu_s() - cpu0) / wall)


async def handoff(impl, row, tasks, seconds):
    name = "bench:handoff"
    await cycle(impl, name)
    st = {"holder": -1, "released": 0, "timeouts": 0, "errors": 0}
    taken = asyncio.Event()
    lat = []
    cpu0, t0 = cpu_s(), time.perf_counter_ns()
    end = t0 + int(seconds * 1e9)

    async def worker(me):
        while time.perf_counter_ns() < end and st["errors"] < 1000:
            lock = impl.lock(name)
            left = (end - time.perf_counter_ns()) / 1e9 + PATIENCE_S
            try:
                if not await impl.acquire(lock, max(0.001, left)):
                    return
            except Exception as e:  # noqa: BLE001
                if st["errors"] == 0:
                    print(f"{row}: {e!r}", file=sys.stderr)
                st["errors"] += 1
                continue
            got = time.perf_counter_ns()
            if st["holder"] >= 0 and st["holder"] != me and got < end:
                lat.append(got - st["released"])
            st["holder"] = me
            taken.set()
            await asyncio.sleep(HOLD_S)
            st["released"] = time.perf_counter_ns()
            await lock.release()
            limit = time.perf_counter_ns() + int(PATIENCE_S * 1e9)
            while st["holder"] == me:
                now = time.perf_counter_ns()
                if now >= end:
                    break
                if now >= limit:
                    st["timeouts"] += 1
                    break
                taken.clear()
                try:
                    await asyncio.wait_for(taken.wait(), (min(limit, end) - now) / 1e9)
                except asyncio.TimeoutError:
                    pass

    await asyncio.gather(*(worker(i) for i in range(tasks)))
    wall = (end - t0) / 1e9
    emit(row, threads=tasks, cycles=len(lat) / wall, handoff_p50_us=q_us(lat, 0.5),
         handoff_p90_us=q_us(lat, 0.9), handoff_p99_us=q_us(lat, 0.99), errors=st["errors"],
         patience_timeouts=st["timeouts"],
         client_cpu_pct=100 * (cpu_s() - cpu0) / ((time.perf_counter_ns() - t0) / 1e9))


async def cost(impl, row, n):
    errors, t0 = 0, time.monotonic()
    for _ in range(n):
        if time.monotonic() - t0 > 60:
            break
        try:
            await cycle(impl, "bench:cost")
        except Exception:  # noqa: BLE001
            errors += 1
    emit(row, n=n, errors=errors)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--impl", choices=("redlockc", "redispy"), required=True)
    ap.add_argument("--workloads", default="t1,t16,handoff")
    ap.add_argument("--cycles", type=int, default=2000)
    a = ap.parse_args()
    impl = (Ours if a.impl == "redlockc" else RedisPy)(a.node)
    try:
        for w in a.workloads.split(","):
            row = f"aio.{a.impl}.{w}"
            if w in ("t1", "t16"):
                await cycles(impl, row, 1 if w == "t1" else 16, a.seconds)
            elif w == "handoff":
                await handoff(impl, row, 8, a.seconds)
            elif w == "cost":
                await cost(impl, row, a.cycles)
    finally:
        await impl.close()


if __name__ == "__main__":
    asyncio.run(main())
