"""The Python peers, run by judge.py in the peers' venv: redis-py's Lock
(redispy), redis.asyncio's Lock (aioredispy) and pottery's Redlock (pottery).

    python peer_py.py LIB MODE URIS CHECKER SIDE ARGS...

The modes and the control protocol are those of peer_node.js and peer_go.go
(judge.py's docstring has them). The sync peers run in threads
(asyncio.to_thread), redis.asyncio's Lock in tasks of one loop.
"""
import asyncio
import random
import sys
import time

import redis
import redis.asyncio

try:
    from pottery import Redlock
except ImportError:  # only the pottery peer needs it
    Redlock = None


class RedisPy:
    """redis-py's Lock: SET NX PX, a Lua compare-and-delete, a Lua extend."""

    def __init__(self, uris):
        self.r = redis.Redis.from_url(uris[0])

    def acquire(self, name, lease_ms, wait_ms):
        lock = self.r.lock(name, timeout=lease_ms / 1000, thread_local=False)
        if wait_ms:
            ok = lock.acquire(blocking=True, blocking_timeout=wait_ms / 1000)
        else:
            ok = lock.acquire(blocking=False)
        return lock if ok else None

    def release(self, lock):
        lock.release()

    def extend(self, lock, lease_ms):
        return lock.extend(lease_ms / 1000, replace_ttl=True)


class AioRedisPy:
    """redis.asyncio's Lock: the same scripts, awaited."""
    is_async = True

    def __init__(self, uris):
        self.r = redis.asyncio.Redis.from_url(uris[0])

    async def acquire(self, name, lease_ms, wait_ms):
        lock = self.r.lock(name, timeout=lease_ms / 1000, thread_local=False)
        if wait_ms:
            ok = await lock.acquire(blocking=True, blocking_timeout=wait_ms / 1000)
        else:
            ok = await lock.acquire(blocking=False)
        return lock if ok else None

    async def release(self, lock):
        await lock.release()

    async def extend(self, lock, lease_ms):
        return await lock.extend(lease_ms / 1000, replace_ttl=True)


class Pottery:
    """pottery's Redlock over every URI (its key is "redlock:" + the name)."""

    def __init__(self, uris):
        self.masters = {redis.Redis.from_url(u) for u in uris}

    def acquire(self, name, lease_ms, wait_ms):
        lock = Redlock(key=name, masters=self.masters, auto_release_time=lease_ms / 1000,
                       num_extensions=10_000)
        if wait_ms:
            ok = lock.acquire(blocking=True, timeout=wait_ms / 1000)
        else:
            ok = lock.acquire(blocking=False)
        return lock if ok else None

    def release(self, lock):
        lock.release()

    def extend(self, lock, lease_ms):
        lock.extend()  # to its auto_release_time; raises if not extended
        return True


LIBS = {"redispy": RedisPy, "aioredispy": AioRedisPy, "pottery": Pottery}


class Peer:
    """One peer: its lock calls (awaitable either way) and the control client."""

    def __init__(self, lib, uris, checker, side):
        self.lib = LIBS[lib](uris)
        self.side = side
        self.ctl = redis.asyncio.Redis.from_url(uris[0], decode_responses=True)
        self.checker_text = open(checker).read()

    async def call(self, method, *args):
        fn = getattr(self.lib, method)
        if getattr(self.lib, "is_async", False):
            return await fn(*args)
        return await asyncio.to_thread(fn, *args)

    async def check(self, name, delta):
        keys = [f"chk:{name}", f"chk:{name}:who", "chk:bad", "chk:sections"]
        await self.ctl.eval(self.checker_text, 4, *keys, delta, self.side, name)

    async def say(self, name, value):
        await self.ctl.rpush(f"ctl:{name}", value)

    async def take(self, name, timeout=30):
        got = await self.ctl.blpop([f"go:{name}"], timeout=timeout)
        if got is None:
            raise AssertionError(f"nothing on go:{name} within {timeout} s")
        return got[1]


def now_ns():
    return time.time_ns()  # wall clock: comparable across processes


async def contend(p, seconds, workers, lease_ms, wait_ms, names):
    """Workers take random names until the deadline; each section goes through
    the checker."""
    names = names.split(",")
    deadline = time.monotonic() + float(seconds)
    counts = {"sections": 0, "tries": 0, "errors": 0}
    first_error = []

    async def worker(seed):
        rnd = random.Random(seed)
        for _ in range(100_000):
            if time.monotonic() >= deadline:
                return
            name = rnd.choice(names)
            counts["tries"] += 1
            try:
                lock = await p.call("acquire", name, int(lease_ms), int(wait_ms))
                if lock is None:
                    continue
                await p.check(name, 1)
                await asyncio.sleep(rnd.random() * 0.002)
                await p.check(name, -1)
                await p.call("release", lock)
                counts["sections"] += 1
            except Exception as e:  # noqa: BLE001  (counted; the judge fails the row)
                counts["errors"] += 1
                first_error.append(f"{type(e).__name__}: {e}")

    await asyncio.gather(*(worker(i) for i in range(int(workers))))
    for k, v in counts.items():
        print(f"RESULT {k} {v}")
    if first_error:
        print(f"ERROR {first_error[0]}")


async def hold(p, rounds, prefix, lease_ms):
    """Hand-off peer -> library: hold, say so, release when told; say when."""
    for i in range(int(rounds)):
        name = f"{prefix}:{i}"
        lock = await p.call("acquire", name, int(lease_ms), 5000)
        if lock is None:
            await p.say(name, "none")
            continue
        await p.say(name, "held")
        await p.take(name)
        t0 = now_ns()
        await p.call("release", lock)
        await p.say(name, str(t0))


async def wait(p, rounds, prefix, lease_ms):
    """Hand-off library -> peer: told the library holds, wait for it; say when got."""
    for i in range(int(rounds)):
        name = f"{prefix}:{i}"
        await p.take(name)
        await p.say(name, "waiting")
        lock = await p.call("acquire", name, int(lease_ms), 10_000)
        t1 = now_ns()
        await p.say(name, str(t1) if lock else "none")
        if lock:
            await p.call("release", lock)


async def extend(p, name, lease_ms, hold_ms, every_ms):
    """Hold with a lease and extend it past its end; release when told."""
    lock = await p.call("acquire", name, int(lease_ms), 5000)
    if lock is None:
        await p.say(name, "none")
        return
    await p.say(name, "held")
    ok = bad = 0
    end = time.monotonic() + int(hold_ms) / 1000
    while time.monotonic() < end:
        await asyncio.sleep(int(every_ms) / 1000)
        try:
            ok += bool(await p.call("extend", lock, int(lease_ms)))
        except Exception:  # noqa: BLE001  (counted; the judge fails the row)
            bad += 1
    await p.say(name, f"extended {ok} failed {bad}")
    await p.take(name)
    await p.call("release", lock)
    await p.say(name, "released")


async def try_(p, name, lease_ms, every_ms):
    """While the library holds: try every every_ms until told to stop; then,
    once the library released, wait for it."""
    await p.take(name)  # "held"
    tries = got = 0
    for _ in range(10_000):
        if await p.ctl.lpop(f"go:{name}"):  # "done"
            break
        tries += 1
        lock = await p.call("acquire", name, int(lease_ms), 0)
        if lock is not None:
            got += 1
            await p.call("release", lock)
        await asyncio.sleep(int(every_ms) / 1000)
    await p.say(name, f"tries {tries} got {got}")
    await p.take(name)  # "released"
    lock = await p.call("acquire", name, int(lease_ms), 3000)
    await p.say(name, "after got" if lock else "after none")
    if lock:
        await p.call("release", lock)


MODES = {"contend": contend, "hold": hold, "wait": wait, "extend": extend, "try": try_}


async def main(argv):
    lib, mode, uris, checker, side, *args = argv
    p = Peer(lib, uris.split(","), checker, side)
    try:
        await MODES[mode](p, *args)
    except Exception as e:  # noqa: BLE001  (the judge reads it)
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
