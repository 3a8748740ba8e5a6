"""The classic-format peers against this library on the same names: the judge.

Run by run.sh (which installs the peers) in the peers' venv, with the build
tree's redlockc on PYTHONPATH. Starts its own redis-servers (RLC_SERVER, as
the other suites; 1, and 3 for Redlock), then peer by peer runs the peer (a
process of its own: peer_py.py, peer_node.js, peer_go) and this library's
Python binding with format="classic" (here, in threads) on the same names.
Every critical section of either side goes through checker.lua on the first
server, which records overlaps. Prints one line per scenario; exits 1 if any
check failed.

    python judge.py [--standin] [peer ...]   (default: every peer)

--standin: redis-py's Lock plays this library's part (checks the judge and
the peers before the library has the format; no watchdog row).

Control protocol (all on the first server): a peer says things on the list
ctl:NAME and is told things on go:NAME. The modes a peer runs:
  contend SECONDS WORKERS LEASE_MS WAIT_MS NAMES   loop on random names
  hold ROUNDS PREFIX LEASE_MS       hand-off peer -> library: hold PREFIX:i,
                                    say "held", release when told, say when (ns)
  wait ROUNDS PREFIX LEASE_MS       hand-off library -> peer: told "held", say
                                    "waiting", acquire, say when (ns)
  extend NAME LEASE_MS HOLD_MS EVERY_MS   hold with a lease and extend it past
                                    its end; say "extended N failed M"; release
                                    when told; say "released"
  try NAME LEASE_MS EVERY_MS        told "held": try every EVERY_MS until told
                                    "done"; say "tries N got M"; told
                                    "released": wait for it, say "after got"
Times are wall-clock ns (time.time_ns and its peers), one machine.
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

from redis_servers import RedisServer, wait_until  # noqa: E402

CHECKER = os.path.join(HERE, "checker.lua")
CONTEND_S = 3
WORKERS = 3  # each side's threads / tasks / goroutines
CONTEND_LEASE_MS = 2000
CONTEND_WAIT_MS = 500
NAMES = ["c:0", "c:1", "c:2"]
ROUNDS = 10  # hand-off rounds each way
LEASE_MS = 1000  # the lease that extends and the watchdog must outlast
HOLD_MS = 2500  # > 2 x LEASE_MS
EVERY_MS = 300  # extend period (a stall of 700 ms on a busy machine still leaves the lease)
TRY_MS = 100  # the other side's try period while the name is held
# A Redlock node's deadline: the default 50 ms is missed now and then on this
# 2-core machine under load (the peers wait for their nodes without one).
NODE_TIMEOUT = 0.5
# Commands that try to take a classic lock: a waiter is seen trying when
# their count grows (every peer's acquire is one of these).
TRY_COMMANDS = ("set", "setnx", "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall")

PY = sys.executable
PEERS = {
    # name: (command, does Redlock over N masters, the key prefix it adds)
    "redispy": ([PY, os.path.join(HERE, "peer_py.py"), "redispy"], False, ""),
    "aioredispy": ([PY, os.path.join(HERE, "peer_py.py"), "aioredispy"], False, ""),
    "pottery": ([PY, os.path.join(HERE, "peer_py.py"), "pottery"], True, "redlock:"),
    "noderedlock": (["node", os.path.join(HERE, "peer_node.js")], True, ""),
    "redsync": ([os.environ.get("CLASSIC_PEER_GO", "peer_go")], True, ""),
}


class Standin:
    """redis-py's Lock behind the library's Client.lock() interface (--standin)."""

    class Lock:
        def __init__(self, r, name):
            self.r, self.name, self.lock = r, name, None

        def acquire(self, blocking=True, timeout=-1, lease=None):
            lock = self.r.lock(self.name, timeout=lease, thread_local=False)
            ok = lock.acquire(blocking=blocking,
                              blocking_timeout=None if timeout in (-1, None) else timeout)
            self.lock = lock if ok else None
            return ok

        def release(self):
            self.lock.release()

        def extend(self, seconds):
            self.lock.extend(seconds, replace_ttl=True)

    def __init__(self, uris, key_prefix=""):
        self.r = redis.Redis.from_url(uris[0])
        self.prefix = key_prefix

    def lock(self, name, owner=None):
        return Standin.Lock(self.r, self.prefix + name)

    def close(self):
        self.r.close()


class Judge:
    def __init__(self, servers, standin):
        self.servers = servers
        self.raw = [redis.Redis(port=s.port, socket_timeout=40, decode_responses=True)
                    for s in servers]
        self.checker_text = open(CHECKER).read()
        self.standin = standin
        self.failed = 0
        self.rows = 0

    # ---- plumbing -----------------------------------------------------------

    def uris(self, n):
        return [s.uri for s in self.servers[:n]]

    def client(self, peer, n=1, **options):
        prefix = PEERS[peer][2]
        if self.standin:
            return Standin(self.uris(n), key_prefix=prefix)
        import redlockc
        return redlockc.Client(self.uris(n), format="classic", key_prefix=prefix,
                               watchdog_timeout=LEASE_MS / 1000, node_timeout=NODE_TIMEOUT,
                               **options)

    def peer(self, peer, mode, n, *args):
        cmd, _, _ = PEERS[peer]
        env = dict(os.environ, NODE_PATH=os.environ.get("CLASSIC_PEER_NODE_PATH", ""))
        argv = [*cmd, mode, ",".join(self.uris(n)), CHECKER, peer, *[str(a) for a in args]]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)

    def finish(self, proc, timeout=60):
        """Waits for the peer: its RESULTs as a dict, its ERRORs and a bad exit as problems."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results, problems = {}, []
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if parts[0] == "RESULT":
                results[parts[1]] = parts[2]
            elif parts[0] == "ERROR":
                problems.append("peer: " + line[6:])
        if proc.returncode != 0 and not problems:
            problems.append(f"peer exit {proc.returncode}: {err[-1500:]}")
        return results, problems

    def take(self, name, timeout=30):
        got = self.raw[0].blpop([f"ctl:{name}"], timeout=timeout)
        if got is None:
            raise AssertionError(f"the peer said nothing on ctl:{name} within {timeout} s")
        return got[1]

    def say(self, name, value):
        self.raw[0].rpush(f"go:{name}", value)

    def check(self, name, delta, side="lib"):
        keys = [f"chk:{name}", f"chk:{name}:who", "chk:bad", "chk:sections"]
        return self.raw[0].eval(self.checker_text, 4, *keys, delta, side, name)

    def attempts(self):
        """How many commands that may take a lock the first server has run."""
        stats = self.raw[0].info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in TRY_COMMANDS)

    def seen_trying(self, base):
        """True once a waiter's attempt has been refused (a try command since base)."""
        return bool(wait_until(lambda: self.attempts() > base, timeout=2, interval=0.002))

    def subscribed(self, name):
        """Whether some connection listens on a channel naming `name` (the
        library's waiters do; the peers have no pub/sub)."""
        pattern = "*" + name.replace("[", "\\[") + "*"
        return bool(self.raw[0].execute_command("PUBSUB", "CHANNELS", pattern))

    def flush(self):
        for r in self.raw:
            r.flushall()

    def row(self, peer, scenario, problems, detail):
        verdict = "pass" if not problems else "FAIL"
        self.failed += bool(problems)
        self.rows += 1
        text = detail + ("" if not problems else "; " + "; ".join(problems))
        print(f"{peer:11} {scenario:12} {verdict}  {text}", flush=True)


def dephase():
    """A random pause before a release, so that it falls anywhere in a polling
    waiter's retry period (not always just after its first refused try)."""
    time.sleep(random.uniform(0, 0.2))


def ms(ns_list):
    return statistics.median(ns_list) / 1e6 if ns_list else float("nan")


# ---- scenarios ------------------------------------------------------------------------

def contend(j, peer, n=1):
    """Both sides take random names of 3 for a few seconds, WORKERS each; the
    checker sees every section."""
    j.flush()
    client = j.client(peer, n)
    proc = j.peer(peer, "contend", n, CONTEND_S, WORKERS, CONTEND_LEASE_MS, CONTEND_WAIT_MS,
                  ",".join(NAMES))
    deadline = time.monotonic() + CONTEND_S
    counts = {"sections": 0, "errors": 0}
    errors = []
    lock_counts = threading.Lock()

    def worker(seed):
        rnd = random.Random(seed)
        for _ in range(100_000):
            if time.monotonic() >= deadline:
                return
            name = rnd.choice(NAMES)
            try:
                lock = client.lock(name)
                if not lock.acquire(timeout=CONTEND_WAIT_MS / 1000,
                                    lease=CONTEND_LEASE_MS / 1000):
                    continue
                j.check(name, 1)
                time.sleep(rnd.random() * 0.002)
                j.check(name, -1)
                lock.release()
                with lock_counts:
                    counts["sections"] += 1
            except Exception as e:  # noqa: BLE001  (counted; fails the row)
                with lock_counts:
                    counts["errors"] += 1
                    errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=CONTEND_S + 30)
    results, problems = j.finish(proc)
    uuid = getattr(client, "uuid", "standin")
    client.close()
    bad = j.raw[0].lrange("chk:bad", 0, -1)
    peer_sections = int(results.get("sections", 0))
    if bad:
        problems.append(f"{len(bad)} overlaps, first: {bad[0]}")
    if counts["sections"] == 0:
        problems.append("the library never got in")
    if peer_sections == 0:
        problems.append("the peer never got in")
    if counts["errors"]:
        problems.append(f"library errors {counts['errors']}, first: {errors[0]}")
    if int(results.get("errors", 0)):
        problems.append(f"peer errors {results['errors']}")
    # A key left at the end: the library's (its token starts with its uuid)
    # fails the row; a peer's is written in the row (see the README).
    left = [(i, name, r.get(PEERS[peer][2] + name)) for name in NAMES
            for i, r in enumerate(j.raw[:n]) if r.exists(PEERS[peer][2] + name)]
    ours = [x for x in left if x[2] and x[2].startswith(uuid + ":")]
    theirs = [x for x in left if x not in ours]
    if ours:
        problems.append(f"the library left keys: {ours}")
    not_zero = [name for name in NAMES if int(j.raw[0].get(f"chk:{name}") or 0)]
    if not_zero:
        problems.append(f"checker counts not back to 0: {not_zero}")
    where = "1 node" if n == 1 else f"{n} masters"
    j.row(peer, "contend" if n == 1 else f"contend x{n}", problems,
          f"{where}, {CONTEND_S} s: library {counts['sections']} sections, "
          f"peer {peer_sections} (of {results.get('tries', '?')} tries), overlaps {len(bad)}"
          + (f"; the peer left {theirs} (node, name, token)" if theirs else ""))


def handoff_to_lib(j, peer):
    """The peer holds; the library's waiter waits; the peer releases."""
    j.flush()
    client = j.client(peer)
    proc = j.peer(peer, "hold", 1, ROUNDS, "ho:p2l", 10_000)
    times, problems, subscribed, trying = [], [], 0, 0
    try:
        for i in range(ROUNDS):
            name = f"ho:p2l:{i}"
            said = j.take(name)
            if said != "held":
                problems.append(f"round {i}: the peer did not hold ({said})")
                continue
            base = j.attempts()
            lock = client.lock(name, owner=1000 + i)  # taken in a thread, released here
            got = {}

            def waiter(lock=lock, got=got):
                got["ok"] = lock.acquire(timeout=10, lease=10)
                got["t1"] = time.time_ns()

            t = threading.Thread(target=waiter)
            t.start()
            trying += j.seen_trying(base)
            subscribed += bool(wait_until(lambda name=name: j.subscribed(name), timeout=0.5))
            dephase()
            j.say(name, "release")
            t0 = int(j.take(name))
            t.join(timeout=15)
            if not got.get("ok"):
                problems.append(f"round {i}: the library's waiter did not get it")
                continue
            times.append(got["t1"] - t0)
            lock.release()
    except AssertionError as e:
        problems.append(str(e))
    _, peer_problems = j.finish(proc)
    client.close()
    problems += peer_problems
    j.row(peer, "handoff p->l", problems,
          f"{len(times)}/{ROUNDS} rounds, p50 {ms(times):.1f} ms from the peer's release to "
          f"the library's waiter (waiter seen trying {trying}/{ROUNDS}, subscribed "
          f"{subscribed}/{ROUNDS})")


def handoff_to_peer(j, peer):
    """The library holds; the peer's waiter waits; the library releases."""
    j.flush()
    client = j.client(peer)
    proc = j.peer(peer, "wait", 1, ROUNDS, "ho:l2p", 10_000)
    times, problems, trying = [], [], 0
    try:
        for i in range(ROUNDS):
            name = f"ho:l2p:{i}"
            lock = client.lock(name)
            if not lock.acquire(timeout=5, lease=10):
                problems.append(f"round {i}: the library did not get a free name")
                continue
            base = j.attempts()
            j.say(name, "held")
            j.take(name)  # "waiting"
            trying += j.seen_trying(base)
            dephase()
            t0 = time.time_ns()
            lock.release()
            said = j.take(name)
            if said == "none":
                problems.append(f"round {i}: the peer's waiter did not get it")
                continue
            times.append(int(said) - t0)
    except AssertionError as e:
        problems.append(str(e))
    _, peer_problems = j.finish(proc)
    client.close()
    problems += peer_problems
    j.row(peer, "handoff l->p", problems,
          f"{len(times)}/{ROUNDS} rounds, p50 {ms(times):.1f} ms from the library's release "
          f"to the peer's waiter (waiter seen trying {trying}/{ROUNDS})")


def lib_keeps_peer_out(j, peer, watchdog=False):
    """The library holds past its lease (extend every EVERY_MS, or its
    watchdog) while the peer tries every TRY_MS; then releases."""
    j.flush()
    if watchdog and j.standin:
        return
    client = j.client(peer)
    name = "ext:lib"
    proc = j.peer(peer, "try", 1, name, LEASE_MS, TRY_MS)
    problems, extended = [], 0
    try:
        lock = client.lock(name)
        assert lock.acquire(timeout=5, lease=None if watchdog else LEASE_MS / 1000), \
            "the library did not get a free name"
        start = last = time.monotonic()
        j.say(name, "held")
        for _ in range(100):
            if time.monotonic() - start >= HOLD_MS / 1000:
                break
            time.sleep(EVERY_MS / 1000 if not watchdog else 0.1)
            if not watchdog:
                try:
                    lock.extend(LEASE_MS / 1000)
                except Exception as e:  # noqa: BLE001
                    raise AssertionError(
                        f"extend {extended + 1} at {time.monotonic() - start:.3f} s, "
                        f"{time.monotonic() - last:.3f} s after the last, PTTL "
                        f"{j.raw[0].pttl(PEERS[peer][2] + name)} ms: "
                        f"{type(e).__name__}: {e}") from None
                last = time.monotonic()
                extended += 1
        ttl = j.raw[0].pttl(PEERS[peer][2] + name)
        j.say(name, "done")
        said = j.take(name).split()  # tries N got M
        tries, got = int(said[1]), int(said[3])
        lock.release()
        j.say(name, "released")
        after = j.take(name)
        if got:
            problems.append(f"the peer got the name {got} times while the library held it")
        if tries < HOLD_MS // TRY_MS // 2:
            problems.append(f"the peer tried only {tries} times")
        if not 0 < ttl <= LEASE_MS:
            problems.append(f"PTTL at the end of the hold {ttl} ms, not in (0, {LEASE_MS}]")
        if after != "after got":
            problems.append("the peer did not get the name after the library's release")
    except Exception as e:  # noqa: BLE001
        problems.append(f"{type(e).__name__}: {e}")
        tries = got = "?"
        j.say(name, "done")  # so that the peer ends now
        j.say(name, "released")
    _, peer_problems = j.finish(proc)
    client.close()
    problems += peer_problems
    how = f"watchdog ({LEASE_MS} ms)" if watchdog else f"{extended} extends of {LEASE_MS} ms"
    j.row(peer, "watchdog l" if watchdog else "extend l", problems,
          f"library held {HOLD_MS} ms by {how}: peer got it {got} of {tries} tries, "
          f"then got it after the release")


def peer_keeps_lib_out(j, peer):
    """The peer holds past its lease by its extend while the library tries
    every TRY_MS; then the peer releases and the library gets it."""
    j.flush()
    client = j.client(peer)
    name = "ext:peer"
    proc = j.peer(peer, "extend", 1, name, LEASE_MS, HOLD_MS, EVERY_MS)
    problems, tries, got, said = [], 0, 0, "?"
    try:
        assert j.take(name) == "held", "the peer did not hold"
        start = time.monotonic()
        for _ in range(200):
            said = j.raw[0].lpop(f"ctl:{name}")
            if said or time.monotonic() - start > 20:
                break
            tries += 1
            lock = client.lock(name)
            if lock.acquire(blocking=False, lease=LEASE_MS / 1000):
                got += 1
                lock.release()
            time.sleep(TRY_MS / 1000)
        held_s = time.monotonic() - start
        j.say(name, "release")
        released = j.take(name)
        lock = client.lock(name)
        after = released == "released" and lock.acquire(timeout=3, lease=LEASE_MS / 1000)
        if after:
            lock.release()
        if got:
            problems.append(f"the library got the name {got} times while the peer held it")
        if not said or not said.startswith("extended") or " failed 0" not in said:
            problems.append(f"the peer's extends: {said}")
        if held_s * 1000 < LEASE_MS * 2:
            problems.append(f"the peer held only {held_s:.2f} s")
        if not after:
            problems.append("the library did not get the name after the peer's release")
    except Exception as e:  # noqa: BLE001
        problems.append(f"{type(e).__name__}: {e}")
    _, peer_problems = j.finish(proc)
    client.close()
    problems += peer_problems
    j.row(peer, "extend p", problems,
          f"peer held {HOLD_MS} ms ({said}): library got it {got} of {tries} tries, "
          f"then got it after the release")


def checker_self_test(j):
    """The checker flags two sections at once (so a silent run means something)."""
    j.flush()
    j.check("self", 1, "a")
    j.check("self", 1, "b")
    j.check("self", -1, "b")
    j.check("self", -1, "a")
    bad = j.raw[0].lrange("chk:bad", 0, -1)
    j.row("checker", "self-test", [] if len(bad) == 1 else [f"flagged {bad}"],
          f"two sections at once flagged: {bad[0] if bad else 'nothing'}")


def wire_and_limits(j):
    """What a classic hold looks like to a peer, and what the format refuses."""
    if j.standin:
        return
    import redlockc
    j.flush()
    problems = []
    with redlockc.Client(j.uris(1), format="classic") as client:
        lock = client.lock("w:1", owner=1)
        lock.acquire(timeout=1, lease=5)
        kind, value, ttl = j.raw[0].type("w:1"), j.raw[0].get("w:1"), j.raw[0].pttl("w:1")
        uuid, _, attempt = (value or "").rpartition(":")
        if kind != "string" or uuid != client.uuid or not attempt or \
                not all(ch in "0123456789abcdef" for ch in attempt.lower()):
            problems.append(f"key w:1 is {kind} {value!r}, not a string '<uuid>:<hex>'")
        if not 0 < ttl <= 5000:
            problems.append(f"PTTL {ttl} ms not in (0, 5000]")
        if j.raw[0].keys("*") != ["w:1"]:
            problems.append(f"keys beside the lock's: {j.raw[0].keys('*')}")
        try:
            nested = lock.acquire(timeout=0.1, lease=5)
            problems.append(f"a nested acquire by the same owner returned {nested}")
        except ValueError:
            pass
        lock.release()
        if j.raw[0].exists("w:1"):
            problems.append("the key stayed after the release")
        try:
            client.rwlock("w:2").write().acquire(timeout=0.1)
            problems.append("the read-write lock took a name on the classic format")
        except ValueError:
            pass
    try:
        redlockc.Client(j.uris(1), format="classic", fencing=True).close()
        problems.append("fencing=True was accepted with format='classic'")
    except ValueError:
        pass
    j.row("library", "wire+limits", problems,
          "a string key holding '<client uuid>:<attempt hex>' with PX, deleted on release; "
          "refused: a nested acquire, fencing, the lock family")


def run_peer(j, peer):
    scenarios = [(contend, ()), (handoff_to_lib, ()), (handoff_to_peer, ()),
                 (lib_keeps_peer_out, ()), (lib_keeps_peer_out, (True,)),
                 (peer_keeps_lib_out, ())]
    if PEERS[peer][1]:
        scenarios.append((contend, (3,)))
    for scenario, args in scenarios:
        try:
            scenario(j, peer, *args)
        except Exception as e:  # noqa: BLE001  (a row of its own; the next one goes on)
            j.row(peer, scenario.__name__, [f"{type(e).__name__}: {e}"], "raised")


def main(argv):
    standin = "--standin" in argv
    chosen = [a for a in argv if a != "--standin"] or list(PEERS)
    unknown = [p for p in chosen if p not in PEERS]
    if unknown:
        print(f"unknown peers {unknown} (known: {' '.join(PEERS)})", file=sys.stderr)
        return 2
    servers = []
    try:
        for _ in range(3):
            servers.append(RedisServer().start())
        j = Judge(servers, standin)
        checker_self_test(j)
        wire_and_limits(j)
        for peer in chosen:
            run_peer(j, peer)
    finally:
        for s in servers:
            s.stop()
    print(f"classic interop: {j.rows - j.failed} passed, {j.failed} failed")
    return 1 if j.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
