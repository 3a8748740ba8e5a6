"""Real Redisson against this library on the same names: the interop judge.

Run by tests/interop/run.sh (which builds both sides). Starts its own
redis-server (RLC_SERVER, as the other suites), then scenario by scenario
runs Redisson (Side.java, a process of its own) and the Python binding (here,
in threads) on the same names. Every critical section of either side goes
through checker.lua on that server, which flags overlaps the kind forbids.
Prints the interop table; exits 1 if any check failed.

    python3 judge.py CLASSPATH [--cluster] [scenario ...]   (default: every scenario)

--cluster: on a 3+3 Redis Cluster (tests/python/cluster_servers.py) instead,
where both sides use sharded pub/sub (SSUBSCRIBE/SPUBLISH) on Redis 7.
"""
import os
import random
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # redis_servers

import redis  # noqa: E402

import redlockc  # noqa: E402  (the build tree's module: run.sh sets PYTHONPATH)
import redis.cluster  # noqa: E402
from cluster_servers import RedisCluster  # noqa: E402
from redis_servers import RedisServer, wait_until  # noqa: E402

CHECKER = os.path.join(HERE, "checker.lua")
WATCHDOG_MS = 1000  # both sides' watchdog timeout: renewals every third of it
HOLD_MS = 2500  # watchdog holds last longer than 2 x WATCHDOG_MS
CONTEND_S = 3
# A multi-lock side needs every name of its pair free at once: Redisson's takes
# them one by one, so it gets fewer turns; a longer window gives both sides some.
CONTEND_MULTI_S = 6
ROUNDS = 15  # hand-off rounds each way
NAMES = ["c:0", "c:1", "c:2", "c:3"]  # four slots: spread over a cluster's masters
MULTI_NAMES = [f"{{m}}{i}" for i in range(8)]  # one slot (a cluster needs it); 8: less contention
PERMITS = 3  # semaphores' count in the contention runs


class Judge:
    """The server, the Python client, the Java command line and the findings."""

    def __init__(self, classpath, server=None, cluster=None):
        self.classpath = classpath
        if cluster:
            self.nodes = cluster.servers
            self.uri = cluster.uri
            self.java_uri = "cluster:" + ",".join(f"redis://127.0.0.1:{m.port}"
                                                  for m in cluster.masters())
            self.raw = redis.cluster.RedisCluster("127.0.0.1", cluster.masters()[0].port,
                                                  socket_timeout=40, decode_responses=True)
        else:
            self.nodes = [server]
            self.uri = self.java_uri = server.uri
            self.raw = redis.Redis(port=server.port, socket_timeout=40, decode_responses=True)
        self.checker_text = open(CHECKER).read()
        self.pubsub_seen = set()  # "plain" / "sharded": how the waiters subscribed
        self.rows = []  # (scenario, kind, verdict, detail)
        self.failed = 0

    # ---- plumbing -----------------------------------------------------------

    def client(self):
        return redlockc.Client(self.uri, watchdog_timeout=WATCHDOG_MS / 1000)

    def java(self, *args):
        """Starts Side.java with these mode arguments (a child of ours, ended by pid)."""
        cmd = ["java", "-cp", self.classpath, "interop.Side", self.java_uri, str(WATCHDOG_MS), CHECKER,
               *[str(a) for a in args]]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, proc, timeout=120):
        """Waits for Side.java; its CHECK lines as (what, ok, detail), its RESULTs as a dict."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        checks, results = [], {}
        for line in out.splitlines():
            parts = line.split(" ", 3)
            if parts[0] == "CHECK":
                checks.append((parts[1], parts[2] == "ok", " ".join(parts[3:])))
            elif parts[0] == "RESULT":
                results[parts[1]] = parts[2]
            elif parts[0] == "ERROR":
                checks.append(("java_exception", False, line))
        if proc.returncode != 0 and all(ok for _, ok, _ in checks):
            checks.append(("java_exit", False, f"exit {proc.returncode}: {err[-2000:]}"))
        return checks, results

    def take(self, name, timeout=30):
        """The next value on ctl:name (what Side.java says), or an AssertionError."""
        got = self.raw.blpop(["ctl:" + name], timeout=timeout)
        if got is None:
            raise AssertionError(f"nothing on ctl:{name} within {timeout} s")
        return got[1]

    def say(self, name, value="py"):
        self.raw.rpush("ctl:" + name, value)

    def checker(self, keys, args):
        return self.raw.eval(self.checker_text, len(keys), *keys, *args)

    def flush(self):
        for node in self.nodes:
            with node.raw() as r:
                if r.info("replication").get("role") == "master":
                    r.flushall()

    def subscribed(self, fragment, timeout=5.0):
        """True once some connection is subscribed to a channel naming `fragment`
        (plain or sharded, on any node)."""
        pattern = "*" + fragment.replace("[", "\\[") + "*"

        def seen():
            for node in self.nodes:
                with node.raw() as r:
                    if r.execute_command("PUBSUB", "CHANNELS", pattern):
                        self.pubsub_seen.add("plain")
                        return True
                    try:
                        if r.execute_command("PUBSUB", "SHARDCHANNELS", pattern):
                            self.pubsub_seen.add("sharded")
                            return True
                    except redis.ResponseError:  # before Redis 7
                        pass
            return False
        return bool(wait_until(seen, timeout=timeout, interval=0.005))

    def row(self, scenario, kind, problems, detail):
        verdict = "pass" if not problems else "FAIL"
        self.failed += bool(problems)
        self.rows.append((scenario, kind, verdict, detail + ("" if not problems else
                                                             "; " + "; ".join(problems))))
        print(f"{scenario:9} {kind:6} {verdict}  {self.rows[-1][3]}", flush=True)


# ---- this library's side of each kind -------------------------------------------

class PyHolder:
    """One acquire and release of a kind, as Side.java's Holder does it."""

    def __init__(self, client, kind, names, rnd, owner=None):
        # owner None: the calling thread (as Redisson's); an int: any thread.
        self.field, self.amount, self.id = "w", 1, None
        if kind == "rw":
            read = rnd.randrange(10) < 7
            self.field = "r" if read else "w"
            rw = client.rwlock(names[0], owner)
            self.side = rw.read() if read else rw.write()
        elif kind == "write":
            self.side = client.rwlock(names[0], owner).write()
        elif kind == "lock":
            self.side = client.lock(names[0], owner)
        elif kind == "fair":
            self.side = client.fair_lock(names[0], owner)
        elif kind == "multi":
            self.side = client.multi_lock(names, owner)
        elif kind in ("sem", "sem1"):
            self.field, self.amount = "p", (1 + rnd.randrange(2) if kind == "sem" else 1)
            self.side = client.semaphore(names[0])
        elif kind == "psem":
            self.field = "p"
            self.side = client.permit_semaphore(names[0])
        self.kind = kind

    def acquire(self, timeout):
        if self.kind in ("sem", "sem1"):
            return self.side.acquire(self.amount, timeout=timeout)
        if self.kind == "psem":
            self.id = self.side.acquire(timeout=timeout, lease=30)
            return self.id is not None
        return self.side.acquire(timeout=timeout)

    def release(self):
        if self.kind == "psem":
            self.side.release(self.id)
        elif self.kind in ("sem", "sem1"):
            self.side.release(self.amount)
        else:
            self.side.release()


def round_names(kind, direction, i):
    base = f"ho:{kind}:{direction}:{i}"
    # a multi-lock's names share a hash tag: one slot on a cluster
    return [f"{{{base}}}:a", f"{{{base}}}:b"] if kind == "multi" else [base]


# ---- scenarios --------------------------------------------------------------------

def contend(j, kind):
    """Both sides take random names of the kind for a few seconds, 3 threads each."""
    j.flush()
    client = j.client()
    if kind == "sem":
        for n in NAMES:
            client.semaphore(n, permits=PERMITS)
    if kind == "psem":
        for n in NAMES:
            client.permit_semaphore(n, permits=PERMITS)
    names_of_run = MULTI_NAMES if kind == "multi" else NAMES
    seconds = CONTEND_MULTI_S if kind == "multi" else CONTEND_S
    proc = j.java("contend", kind, seconds, 3, PERMITS, *names_of_run)
    problems, counts = [], {"held": 0, "busy": 0, "errors": []}
    mu = threading.Lock()
    try:
        j.take("ready", timeout=60)
        end = time.monotonic() + seconds

        def worker(tid):
            rnd = random.Random(tid)
            seq = 0
            while time.monotonic() < end:
                names = rnd.sample(names_of_run, 2 if kind == "multi" else 1)
                h = PyHolder(client, kind, names, rnd)
                try:
                    if not h.acquire(5):
                        with mu:
                            counts["busy"] += 1
                        continue
                    who = f"py:{tid}:{seq}"
                    seq += 1
                    for n in names:
                        j.checker(keys=[f"{{{n}}}:chk", f"{{{n}}}:log"],
                                  args=[h.field, h.amount, PERMITS, who])
                    time.sleep(rnd.randrange(3) / 1000)
                    for n in names:
                        j.checker(keys=[f"{{{n}}}:chk", f"{{{n}}}:log"],
                                  args=[h.field, -h.amount, PERMITS, who])
                    h.release()
                    with mu:
                        counts["held"] += 1
                except Exception as e:  # reported, the run goes on
                    with mu:
                        counts["errors"].append(repr(e))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 60)
    finally:
        checks, results = j.finish(proc)
    problems += [f"java {w}: {d}" for w, ok, d in checks if not ok]
    problems += [f"python: {e}" for e in counts["errors"][:3]]
    rmax = pmax = bad = 0
    sides = {"java": 0, "py": 0}
    for n in names_of_run:
        chk = j.raw.hgetall(f"{{{n}}}:chk")
        if int(chk.get("bad", 0)):
            bad += int(chk["bad"])
            log = j.raw.lrange(f"{{{n}}}:log", 0, -1)
            first = next(k for k, e in enumerate(log) if " w=2" in e or "w=1 r=" in e
                         and " r=0" not in e or f" p={PERMITS + 1}" in e)
            problems.append(f"overlap on {n}: " + " | ".join(log[max(0, first - 3):first + 1]))
        rmax, pmax = max(rmax, int(chk.get("rmax", 0))), max(pmax, int(chk.get("pmax", 0)))
        if any(int(chk.get(f, 0)) for f in "wrp"):
            problems.append(f"{n}: counts not back to 0: {chk}")
        for entry in j.raw.lrange(f"{{{n}}}:log", 0, -1):
            sides[entry.split(":")[0]] += 1
    if not sides["java"] or not sides["py"]:
        problems.append(f"one side never got in: {sides}")
    if kind == "rw" and rmax < 2:
        problems.append(f"readers never overlapped (rmax {rmax})")
    left = [n for n in names_of_run if kind not in ("sem", "psem") and j.raw.exists(n)]
    if left:
        problems.append(f"names still held after both sides stopped: {left}")
    if kind in ("sem", "psem"):
        counts_left = {n: j.raw.get(n) for n in NAMES}
        if any(v != str(PERMITS) for v in counts_left.values()):
            problems.append(f"permits not all back: {counts_left}")
    detail = (f"sections java {results.get('held')} py {counts['held']}, overlaps {bad}"
              + (f", readers together up to {rmax}" if kind == "rw" else "")
              + (f", permits out up to {pmax}/{PERMITS}" if kind in ("sem", "psem") else ""))
    client.close()
    j.row("contend", kind, problems, detail)


def handoff(j, kind):
    """ROUNDS hand-offs each way; p50 of release -> the waiter's return (CLOCK_MONOTONIC)."""
    j.flush()
    client = j.client()
    if kind in ("sem1", "psem"):
        for d in ("jp", "pj"):
            for i in range(ROUNDS):
                n = round_names(kind, d, i)[0]
                (client.semaphore if kind == "sem1" else client.permit_semaphore)(n, permits=1)
    proc = j.java("handoff", kind, ROUNDS)
    problems, jp, pj = [], [], []
    try:
        for i in range(ROUNDS):  # Redisson's release wakes this library's waiter
            j.take("jp:held", timeout=60)
            names = round_names(kind, "jp", i)
            h = PyHolder(client, kind, names, random.Random(i), owner=i + 1)
            got = {}
            if kind == "lock":
                probe = client.lock(names[0], owner=1000)
                if not probe.locked() or probe.owned():
                    problems.append(f"round {i}: locked()/owned() wrong on Redisson's hold")
            t = threading.Thread(target=lambda: got.update(ok=h.acquire(10),
                                                            t1=time.monotonic_ns()))
            t.start()
            if not j.subscribed(names[0]):
                problems.append(f"jp round {i}: the library's waiter never subscribed")
            j.say("jp:go")
            t0 = int(j.take("jp:t0"))
            t.join(15)
            if got.get("ok"):
                jp.append((got["t1"] - t0) / 1e6)
                h.release()
            else:
                problems.append(f"jp round {i}: the library's waiter did not get it: {got}")
            j.say("jp:done")
        for i in range(ROUNDS):  # this library's release wakes Redisson's waiter
            names = round_names(kind, "pj", i)
            h = PyHolder(client, kind, names, random.Random(i), owner=i + 1)
            if not h.acquire(5):
                problems.append(f"pj round {i}: could not take a fresh name")
                j.say("pj:held")
                j.take("pj:t1")
                continue
            j.say("pj:held")
            if not j.subscribed(names[0]):
                problems.append(f"pj round {i}: Redisson's waiter never subscribed")
            t0 = time.monotonic_ns()
            h.release()
            t1 = j.take("pj:t1")
            if t1 == "timeout":
                problems.append(f"pj round {i}: Redisson's waiter did not get it")
            else:
                pj.append((int(t1) - t0) / 1e6)
    except (AssertionError, redlockc.Error) as e:
        problems.append(str(e))
    finally:
        checks, _ = j.finish(proc)
    problems += [f"java {w}: {d}" for w, ok, d in checks if not ok]
    client.close()
    p50 = (lambda xs: f"{statistics.median(xs):.2f} ms" if xs else "-")
    j.row("handoff", kind, problems,
          f"Redisson->library p50 {p50(jp)}, library->Redisson p50 {p50(pj)} "
          f"({len(jp)}+{len(pj)} rounds, {'+'.join(sorted(j.pubsub_seen))} pub/sub)")
    j.pubsub_seen.clear()
    return p50(jp), p50(pj)


def watchdog(j):
    """Each side's watchdog hold (no lease) keeps the other out for HOLD_MS > 2 x timeout."""
    j.flush()
    client = j.client()
    proc = j.java("watchdog", HOLD_MS)
    problems = []
    try:
        j.take("wd:held", timeout=60)
        theirs = client.lock("wd:java", owner=1)
        got = tries = 0
        end = time.monotonic() + HOLD_MS / 1000
        for _ in range(10_000):
            if time.monotonic() >= end:
                break
            tries += 1
            if theirs.acquire(blocking=False):
                got += 1
                theirs.release()
            time.sleep(0.1)
        if got:
            problems.append(f"Redisson's watchdog hold: the library got it {got} of {tries} tries")
        j.say("wd:stop")
        j.take("wd:released")
        if not theirs.acquire(timeout=2):
            problems.append("not free for the library after Redisson's unlock")
        else:
            theirs.release()
        mine = client.lock("wd:py", owner=2)
        mine.acquire()  # watchdog lease
        j.say("wd:pheld")
        j.take("wd:pstop", timeout=HOLD_MS / 1000 + 30)
        if not mine.owned():
            problems.append("the library's watchdog hold was lost")
        mine.release()
        j.say("wd:preleased")
    except (AssertionError, redlockc.Error) as e:
        problems.append(str(e))
    finally:
        checks, results = j.finish(proc)
    problems += [f"java {w}: {d}" for w, ok, d in checks if not ok]
    client.close()
    j.row("watchdog", "lock", problems,
          f"held {HOLD_MS} ms with a {WATCHDOG_MS} ms watchdog each way; Redisson saw the "
          f"library's TTL down to {results.get('watchdog_ttl_min_ms')} ms")


def force(j):
    """Redisson's isLocked, remainTimeToLive, getHoldCount and forceUnlock on the library's holds."""
    j.flush()
    client = j.client()
    proc = j.java("force")
    problems, notes = [], []
    try:
        fixed, wd = client.lock("fu:lease", owner=1), client.lock("fu:wd", owner=2)
        fixed.acquire(lease=20)
        wd.acquire()
        j.say("fu:held")
        j.take("fu:checked", timeout=60)
        waiter, got = client.lock("fu:lease", owner=3), {}
        t = threading.Thread(target=lambda: got.update(ok=waiter.acquire(timeout=10)))
        t.start()
        if not j.subscribed("fu:lease"):
            problems.append("the library's waiter never subscribed")
        j.say("fu:go")
        j.take("fu:forced")
        t.join(15)
        if not got.get("ok"):
            problems.append("forceUnlock did not wake the library's waiter")
        # The watchdog must not bring a force-unlocked hold back.
        back = wait_until(lambda: j.raw.exists("fu:wd"), timeout=2.5 * WATCHDOG_MS / 1000,
                          interval=0.05)
        if back:
            problems.append("the library's watchdog re-created a force-unlocked hold")
        try:
            wd.release()
            problems.append("release of a force-unlocked watchdog hold succeeded")
        except (redlockc.LockLostError, redlockc.NotOwnerError) as e:
            notes.append(f"its release: {type(e).__name__}")
        waiter.release()
        j.say("fu:done")
    except (AssertionError, redlockc.Error) as e:
        problems.append(str(e))
    finally:
        checks, _ = j.finish(proc)
    problems += [f"java {w}: {d}" for w, ok, d in checks if not ok]
    client.close()
    j.row("queries", "lock", problems, "isLocked, remainTimeToLive, getHoldCount, tryLock, "
          "forceUnlock (wakes the library's waiter; " + ", ".join(notes) + ")")


def permits(j):
    """availablePermits and trySetPermits see the library's semaphore holds."""
    j.flush()
    client = j.client()
    problems = []
    sem = client.semaphore("pm:sem", permits=3)
    psem = client.permit_semaphore("pm:psem", permits=3)
    sem.acquire(2)
    pid = psem.acquire(lease=30)
    for kind, name, expected in (("sem", "pm:sem", 1), ("psem", "pm:psem", 2)):
        checks, _ = j.finish(j.java("permits", kind, name, expected))
        problems += [f"java {w}: {d}" for w, ok, d in checks if not ok]
    for what, release in (("semaphore", lambda: sem.release(2)),
                          ("expirable semaphore", lambda: psem.release(pid))):
        try:
            release()
        except redlockc.Error as e:
            problems.append(f"the library's {what} release: {e}")
    client.close()
    j.row("queries", "sem", problems, "availablePermits, trySetPermits on the library's holds")


SCENARIOS = {
    "lock": lambda j: (contend(j, "lock"), handoff(j, "lock"), watchdog(j), force(j)),
    "rw": lambda j: (contend(j, "rw"), handoff(j, "write")),
    "fair": lambda j: (contend(j, "fair"), handoff(j, "fair")),
    "sem": lambda j: (contend(j, "sem"), handoff(j, "sem1"), permits(j)),
    "psem": lambda j: (contend(j, "psem"), handoff(j, "psem")),
    "multi": lambda j: (contend(j, "multi"), handoff(j, "multi")),
}


def main():
    classpath, chosen = sys.argv[1], sys.argv[2:]
    cluster = "--cluster" in chosen
    chosen = [c for c in chosen if c != "--cluster"] or list(SCENARIOS)
    server = RedisCluster() if cluster else RedisServer()
    try:
        server.start()
        j = Judge(classpath, cluster=server) if cluster else Judge(classpath, server=server)
        for name in chosen:
            SCENARIOS[name](j)
    finally:
        server.stop()
    print(f"interop: {len(j.rows) - j.failed} passed, {j.failed} failed")
    sys.exit(1 if j.failed else 0)


if __name__ == "__main__":
    main()
