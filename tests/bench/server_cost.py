#!/usr/bin/env python3
"""server_cost.py - what one lock cycle costs the Redis server, side by side.

    PYTHONPATH=<build>/bindings/python /usr/bin/python3 tests/bench/server_cost.py
        [--cycles N] [--names N] [--server redis-server|valkey-server]

A Redis node runs scripts on one thread, so the server's own time per cycle
is the ceiling of every lock user's throughput on that node. This starts one
server of its own (a free loopback port, no persistence; stopped by pid) and
measures, from `INFO commandstats` deltas (the sum of usec over every
command), the server time per acquire+release cycle of:

  set-nx-px   SET NX PX, then a compare-and-delete script (the classic lock)
  redisson    Redisson's RLock lock and unlock scripts, replayed by a stock
              client (redis-py) in their shape (../shared/REDISSON.md), the
              unlock latch included as current Redisson sends it
  redlockc    this library (the Python binding, default options: no fencing)
  fenced      this library with fencing=1 (a token per new hold: its counter)

for three cycles: fresh (a new name each cycle), nested (one more level on a
name the owner holds, and its release) and contended (a try on a name another
owner holds, refused). Then the keys left on the server after --names
distinct names were acquired and released. Figures only: nothing is judged
here (tests never assert on speed); the ratio column is against Redisson in
the same run.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import redis

import redlockc

# Redisson's RLock scripts in their shape (our words: REDISSON.md).
REDISSON_LOCK = """
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"""
REDISSON_UNLOCK = """
local v = redis.call('get', KEYS[3])
if v ~= false then return tonumber(v) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
local n = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if n > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"""
COMPARE_AND_DELETE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary):
    port, work = free_port(), tempfile.mkdtemp(prefix="rlc-cost-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            r.ping()
            return proc, port, work, r
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"{binary} did not start")
            time.sleep(0.02)


SCRIPT_CALLS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


def server_usec(r, direct):
    """The usec of the commands clients sent: the script calls (whose time
    includes the commands they run: Redis counts those in their own rows as
    well, so summing every row would count them twice) and the contender's
    `direct` commands, none of which its scripts run."""
    stats = r.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in SCRIPT_CALLS + direct)


def measure(r, who, run, cycles):
    """Server µs per cycle of run(i) over `cycles` cycles."""
    r.config_resetstat()
    for i in range(cycles):
        run(i)
    return server_usec(r, who.direct) / cycles


class SetNx:
    direct = ("set",)

    def __init__(self, r):
        self.r, self.cad = r, r.register_script(COMPARE_AND_DELETE)
        self.token = uuid.uuid4().hex

    def fresh(self, i):
        k = f"sn:{i}"
        assert self.r.set(k, self.token, nx=True, px=30000)
        self.cad(keys=[k], args=[self.token])

    def contended(self, i):
        assert not self.r.set("sn:busy", "other", nx=True, px=30000)


class Redisson:
    direct = ("unlink",)  # the latch's removal (sent as UNLINK: its scripts DEL)

    def __init__(self, r):
        self.r = r
        self.lock_s, self.unlock_s = r.register_script(REDISSON_LOCK), r.register_script(REDISSON_UNLOCK)
        self.owner = f"{uuid.uuid4()}:1"

    def lock(self, name, owner=None, lease=30000):
        return self.lock_s(keys=[name], args=[lease, owner or self.owner])

    def unlock(self, name):
        latch = f"redisson_unlock_latch:{{{name}}}:{uuid.uuid4().hex}"
        out = self.unlock_s(keys=[name, f"redisson_lock__channel:{{{name}}}", latch],
                            args=[0, 30000, self.owner, "publish", 10000])
        self.r.unlink(latch)
        return out

    def fresh(self, i):
        assert self.lock(f"rs:{i}") is None
        self.unlock(f"rs:{i}")

    def nested(self, i):
        assert self.lock("rs:outer") is None
        self.unlock("rs:outer")

    def contended(self, i):
        assert self.lock("rs:busy") is not None


class Library:
    direct = ()

    def __init__(self, port, prefix="lc", **options):
        self.client = redlockc.Client(f"redis://127.0.0.1:{port}", **options)
        self.prefix = prefix

    def fresh(self, i):
        lock = self.client.lock(f"{self.prefix}:{i}")
        assert lock.acquire(timeout=0)
        lock.release()

    def nested(self, i):
        lock = self.client.lock(f"{self.prefix}:outer")
        assert lock.acquire(timeout=0)
        lock.release()

    def contended(self, i):
        assert not self.client.lock("lc:busy").acquire(timeout=0)


def keys_left(r, run, names):
    r.flushall()
    for i in range(names):
        run(i)
    time.sleep(0.2)  # let expired keys be reclaimed, as DBSIZE counts them
    return r.dbsize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=20000)
    ap.add_argument("--names", type=int, default=10000)
    ap.add_argument("--server", default=os.environ.get("RLC_SERVER", "redis-server"))
    a = ap.parse_args()
    if not shutil.which(a.server):
        raise SystemExit(f"{a.server} is not installed")
    proc, port, work, r = start_server(a.server)
    try:
        sn, rs, lib = SetNx(r), Redisson(r), Library(port)
        fenced = Library(port, "lf", fencing=1)
        libs = (("set-nx-px", sn), ("redisson", rs), ("redlockc", lib), ("fenced", fenced))
        other = redlockc.Client(f"redis://127.0.0.1:{port}")
        # The contended names: held by another owner for the whole run.
        assert r.set("sn:busy", "other", px=600000)
        assert rs.lock("rs:busy", "someone-else:9", lease=600000) is None  # the whole run
        busy = other.lock("lc:busy")
        assert busy.acquire(timeout=0, lease=600)
        # The nested names: one outer level held by the owner.
        assert rs.lock("rs:outer") is None
        outer = lib.client.lock("lc:outer")
        assert outer.acquire(timeout=0)
        outer_f = fenced.client.lock("lf:outer")
        assert outer_f.acquire(timeout=0)
        for who in (sn, rs, lib, fenced):  # scripts loaded, connections made
            who.fresh(10**9)
        rows = []
        for kind in ("fresh", "nested", "contended"):
            got = {}
            for label, who in libs:
                run = getattr(who, kind, None)
                got[label] = measure(r, who, run, a.cycles) if run else None
            rows.append((kind, got))
        outer.release()
        outer_f.release()
        busy.release()
        left = {label: keys_left(r, who.fresh, a.names) for label, who in libs}
        info = r.info("server")
        print(f"server: {a.server} {info.get('redis_version')} ({info.get('server_name', 'redis')}), "
              f"{a.cycles} cycles each, one client")
        print(f"{'cycle':<10} {'set-nx-px us':>13} {'redisson us':>12} {'redlockc us':>12} "
              f"{'x redisson':>11} {'fenced us':>10} {'x redisson':>11}")
        for kind, got in rows:
            cell = lambda v: f"{v:.2f}" if v is not None else "-"
            ratio = lambda k: got[k] / got["redisson"] if got["redisson"] else float("nan")
            print(f"{kind:<10} {cell(got['set-nx-px']):>13} {cell(got['redisson']):>12} "
                  f"{cell(got['redlockc']):>12} {ratio('redlockc'):>10.2f}x "
                  f"{cell(got['fenced']):>10} {ratio('fenced'):>10.2f}x")
        print(f"keys left after {a.names} distinct names acquired and released: "
              + ", ".join(f"{k} {v}" for k, v in left.items()))
        lib.client.close()
        fenced.client.close()
        other.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
