#!/usr/bin/python3
"""peers.py - the peers of tests/bench on rlc_bench's own servers, in its run.

rlc_bench runs this as its Python driver (run.sh passes it as --py-script):

    /usr/bin/python3 tests/bench/peers/peers.py --seconds S

with the driver's five servers in RLC_BENCH_NODES and the first in
RLC_BENCH_NODE, between its own workloads, once per repeat. It runs
tests/bench/bench_python.py first (its rows pass through unchanged), then,
when RLC_BENCH_PEERS=all (run.sh sets it, except with --quick):

  redisson.*     Redisson's RLock (Java), tests/bench/peers/redisson;
                 classpath in RLC_BENCH_REDISSON_CP, else RLC_BENCH_REDISSON_WHY
  redsync.*      redsync v4 over go-redis v9 (Go), tests/bench/peers/go
  rueidislock.*  rueidislock (Go), the same binary: RLC_BENCH_GO_BIN, else
                 RLC_BENCH_GO_WHY
  bare.*         the same binary without a lock client: SET NX PX, then a
                 compare-and-delete script (the classic format's floor)
  aio.redlockc.*, aio.redispy.*
                 redlockc.asyncio and redis-py's redis.asyncio Lock (aio.py)
  cost.*         the server's time per cycle of each client (below)

Every row is one JSON object per line on stdout; rlc_bench merges them into
its rows. A peer that cannot run gets a "not_run" row per figure, with the
reason: never a silent gap, never a made-up figure.

Server time per cycle (cost.<client>): the client does exactly N cycles on
one name (acquire + release, one thread), in a process of its own, against
the first node; the redis-server process's CPU time (INFO cpu: user +
system, so its network I/O is in) over the whole process, less that of the
same process doing 0 cycles (start, connect, close), divided by N. Also the
commands per cycle from INFO commandstats (those run inside a script
included). One number, comparable across clients whatever their scripts.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
# Commands of a connection's set-up, not of a lock cycle.
SETUP = {"info", "config", "ping", "hello", "client", "select", "command", "cluster", "auth",
         "readonly", "quit", "echo"}

WORKLOADS = {
    "redisson": ["t1", "t16", "handoff", "redlock5"],
    "redsync": ["t1", "t16", "handoff", "redlock5"],
    "rueidislock": ["t1", "t16", "handoff", "redlock5"],
    "bare": ["t1", "t16"],
    "aio.redlockc": ["t1", "t16", "handoff"],
    "aio.redispy": ["t1", "t16", "handoff"],
}


def emit(row, **fields):
    print(json.dumps({"row": row, **fields}), flush=True)


class Budget:
    """rlc_bench kills this driver after 30 * seconds + 120 s; stay inside."""

    def __init__(self, seconds):
        self.end = time.monotonic() + 30 * seconds + 100

    def left(self):
        return self.end - time.monotonic()


def run(argv, timeout, env=None):
    """Runs a child; returns (JSON rows it printed, why it failed or None)."""
    if timeout < 5:
        return [], "out of the driver's time for this repeat"
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return rows_of(out), f"ran past {timeout:.0f} s: killed"
    except OSError as e:
        return [], str(e)
    return rows_of(p.stdout), None if p.returncode == 0 else f"exited with status {p.returncode}"


def rows_of(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return rows


def forward(peer, rows, why):
    """Prints the rows; each expected figure that did not come says why."""
    got = {r.get("row") for r in rows}
    for r in rows:
        print(json.dumps(r), flush=True)
    for w in WORKLOADS.get(peer, []):
        if f"{peer}.{w}" not in got:
            emit(f"{peer}.{w}", not_run=why or "the peer printed no row for it")


def redis_stats(uri):
    """(server CPU seconds, commands called) of the node, connection set-up excluded."""
    import redis
    r = redis.Redis.from_url(uri)
    try:
        cpu = r.info("cpu")
        raw = r.execute_command("INFO", "commandstats")
    finally:
        r.close()
    if isinstance(raw, bytes):
        raw = raw.decode()
    calls = 0
    if isinstance(raw, dict):  # a redis-py that parses it
        items = [(k, v.get("calls", 0)) for k, v in raw.items()]
    else:
        items = []
        for line in raw.splitlines():
            if line.startswith("cmdstat_"):
                name, _, rest = line.partition(":")
                fields = dict(f.split("=", 1) for f in rest.split(",") if "=" in f)
                items.append((name, int(fields.get("calls", 0))))
    for name, n in items:
        base = name.replace("cmdstat_", "").split("|")[0].lower()
        if base not in SETUP:
            calls += int(n)
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"], calls


def cost(name, argv_of, node, n, budget, env=None):
    """cost.<name>: server CPU and commands per cycle over exactly n cycles."""
    try:
        measured = []
        for k in (0, n):
            cpu0, calls0 = redis_stats(node)
            rows, why = run(argv_of(k), min(120, budget.left()), env)
            cpu1, calls1 = redis_stats(node)
            if why or not rows or rows[-1].get("errors"):
                emit(f"cost.{name}", not_run=why or "the cycles failed (see the log)")
                return
            measured.append((cpu1 - cpu0, calls1 - calls0))
        (c0, k0), (c1, k1) = measured
        emit(f"cost.{name}", n=n, server_us_per_cycle=max(0.0, (c1 - c0) * 1e6 / n),
             calls_per_cycle=(k1 - k0) / n)
    except Exception as e:  # noqa: BLE001 - a peer's failure is a row, not a crash
        emit(f"cost.{name}", not_run=repr(e))


def sync_cycles(impl, uri, n):
    """The Python clients' cost workload (run as a child of this script)."""
    errors = 0
    if impl == "redlockc":
        import redlockc
        client = redlockc.Client(uri)
        lock = client.lock("bench:cost")
        for _ in range(n):
            if not lock.acquire(timeout=5):
                errors += 1
                continue
            lock.release()
        client.close()
    else:
        import redis
        r = redis.Redis.from_url(uri)
        for _ in range(n):
            lk = r.lock("bench:cost", timeout=30)
            if not lk.acquire(blocking_timeout=5):
                errors += 1
                continue
            lk.release()
        r.close()
    emit(f"cost.{impl}", n=n, errors=errors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--cycles", type=int, default=2000, help="cycles of a cost run")
    ap.add_argument("--cost-child", choices=("redlockc", "redispy"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    nodes = os.environ.get("RLC_BENCH_NODES", "")
    node = os.environ.get("RLC_BENCH_NODE") or nodes.split(",")[0]
    if a.cost_child:
        sync_cycles(a.cost_child, node, a.cycles)
        return
    budget = Budget(a.seconds)
    secs = f"{a.seconds:g}"

    # The Python binding against redis-py's Lock: bench_python.py's rows, as before.
    rows, why = run([sys.executable, os.path.join(BENCH, "bench_python.py"), "--seconds", secs],
                    min(20 * a.seconds + 60, budget.left()))
    forward("python", rows, why)
    if not rows:
        emit("python", not_run=why or "bench_python.py printed no row")
    if os.environ.get("RLC_BENCH_PEERS") != "all":
        return
    if len(nodes.split(",")) < 5:
        for peer in WORKLOADS:
            forward(peer, [], "RLC_BENCH_NODES does not name 5 servers")
        return

    # Redisson (Java).
    cp = os.environ.get("RLC_BENCH_REDISSON_CP")
    java = ["java", "-cp", cp or "", "bench.Bench", "--nodes", nodes]
    if cp:
        rows, why = run(java + ["--seconds", secs], min(10 * a.seconds + 60, budget.left()))
        forward("redisson", rows, why)
    else:
        forward("redisson", [], os.environ.get("RLC_BENCH_REDISSON_WHY", "not built"))

    # redsync and rueidislock (Go).
    gobin = os.environ.get("RLC_BENCH_GO_BIN")
    for lib in ("redsync", "rueidislock"):
        if gobin:
            rows, why = run([gobin, "--lib", lib, "--nodes", nodes, "--seconds", secs],
                            min(10 * a.seconds + 30, budget.left()))
            forward(lib, rows, why)
        else:
            forward(lib, [], os.environ.get("RLC_BENCH_GO_WHY", "not built"))

    # The classic format's floor: go-redis, SET NX PX + compare-and-delete.
    if gobin:
        rows, why = run([gobin, "--lib", "bare", "--nodes", nodes, "--seconds", secs,
                         "--workloads", "t1,t16"], min(4 * a.seconds + 30, budget.left()))
        forward("bare", rows, why)
    else:
        forward("bare", [], os.environ.get("RLC_BENCH_GO_WHY", "not built"))

    # asyncio: redlockc.asyncio and redis-py's redis.asyncio Lock.
    for impl in ("redlockc", "redispy"):
        rows, why = run([sys.executable, os.path.join(HERE, "aio.py"), "--node", node,
                         "--seconds", secs, "--impl", impl],
                        min(6 * a.seconds + 30, budget.left()))
        forward(f"aio.{impl}", rows, why)

    # The server's time per cycle, one client process at a time.
    n = a.cycles
    for impl in ("redlockc", "redispy"):
        cost(impl, lambda k, impl=impl: [sys.executable, os.path.abspath(__file__), "--cost-child",
                                         impl, "--cycles", str(k)], node, n, budget)
    if cp:
        cost("redisson", lambda k: java + ["--seconds", "1", "--workloads", "cost", "--cycles",
                                           str(k)], node, n, budget)
    else:
        emit("cost.redisson", not_run=os.environ.get("RLC_BENCH_REDISSON_WHY", "not built"))
    for lib in ("redsync", "rueidislock"):
        if gobin:
            cost(lib, lambda k, lib=lib: [gobin, "--lib", lib, "--nodes", nodes, "--seconds", "1",
                                          "--workloads", "cost", "--cycles", str(k)],
                 node, n, budget)
        else:
            emit(f"cost.{lib}", not_run=os.environ.get("RLC_BENCH_GO_WHY", "not built"))
    node_dir = os.environ.get("RLC_BENCH_NODE_DIR")
    if node_dir:
        env = dict(os.environ, NODE_PATH=os.path.join(node_dir, "node_modules"))
        cost("node_redlock", lambda k: ["node", os.path.join(HERE, "node_cost.js"), node, str(k)],
             node, n, budget, env)
    else:
        emit("cost.node_redlock", not_run="npm could not install redlock@5 and ioredis")


if __name__ == "__main__":
    main()
