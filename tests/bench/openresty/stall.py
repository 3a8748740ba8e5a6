#!/usr/bin/python3
"""stall.py - latency of unrelated requests on one nginx worker while Redis
is stopped (tests/bench/openresty/run.sh).

  stall.py --port P --redis-pid PID --mod engine|blocking --stall 0|1
           [--seconds 4] [--load 16]

`load` HTTP/1.1 keep-alive connections loop /b/cycle?mod=... (a lock acquire +
release each, one lock name per connection); the prober sends
/b/ping (no Redis) every 5 ms, open loop (a probe is sent when due even if
earlier ones are still unanswered, each on an idle connection or a new one),
and records each answer's latency from when it was due. With
--stall 1 Redis gets SIGSTOP one second in, and SIGCONT two seconds later.
Prints one JSON line: the probe's p50/p99/max (ms) and count, the cycles
done. Every loop ends at --seconds (plus a 5 s grace for answers).
"""
import argparse
import asyncio
import json
import os
import signal
import time


async def http_get(reader, writer, path):
    writer.write(f"GET {path} HTTP/1.1\r\nHost: b\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
        elif name.lower() == "transfer-encoding" and "chunked" in value:
            length = -1
    if length > 0:
        await reader.readexactly(length)
    elif length < 0:
        while True:
            size = int((await reader.readline()).strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return int(status.split()[1])


async def loader(port, mod, i, stop, counts):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop:
            code = await asyncio.wait_for(
                http_get(reader, writer, f"/b/cycle?mod={mod}&lock=bench:stall:{mod}:{i}"), 10)
            counts[code] = counts.get(code, 0) + 1
    finally:
        writer.close()


async def probe_once(port, idle, scheduled, lat):
    conn = idle.pop() if idle else await asyncio.open_connection("127.0.0.1", port)
    await asyncio.wait_for(http_get(conn[0], conn[1], "/b/ping"), 10)
    lat.append((time.monotonic() - scheduled) * 1000)
    idle.append(conn)


async def prober(port, stop, lat):
    """Open loop: a probe every 5 ms whether or not the last one was answered
    (on an idle connection, else a new one), its latency counted from when
    it was due, so that a stalled worker shows in every probe it held up."""
    idle, tasks = [], []
    due = time.monotonic()
    while due < stop:
        await asyncio.sleep(max(0, due - time.monotonic()))
        tasks.append(asyncio.ensure_future(probe_once(port, idle, due, lat)))
        due += 0.005
    await asyncio.gather(*tasks)
    for _, w in idle:
        w.close()


async def staller(pid, stop_in, cont_in):
    await asyncio.sleep(stop_in)
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(cont_in)
    finally:
        os.kill(pid, signal.SIGCONT)


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[max(0, min(len(v) - 1, int(len(v) * p + 0.999999) - 1))]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--redis-pid", type=int, required=True)
    ap.add_argument("--mod", required=True)
    ap.add_argument("--stall", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--load", type=int, default=16)
    a = ap.parse_args()
    stop = time.monotonic() + a.seconds
    lat, counts = [], {}
    tasks = [loader(a.port, a.mod, i, stop, counts) for i in range(a.load)]
    tasks.append(prober(a.port, stop, lat))
    if a.stall:
        tasks.append(staller(a.redis_pid, 1.0, 2.0))
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True),
                                     a.seconds + 15)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    print(json.dumps({"mod": a.mod, "stall": a.stall, "probes": len(lat),
                      "p50_ms": round(pct(lat, 0.5), 3), "p99_ms": round(pct(lat, 0.99), 3),
                      "max_ms": round(max(lat) if lat else 0, 3),
                      "cycles": counts, "errors": errors[:3]}))


if __name__ == "__main__":
    asyncio.run(main())
