"""What the asyncio tests share: bounded waiting, a client that is always
closed, how many wait on a lock's channel, and a call made in a task of its own."""
import asyncio
import contextlib

import redlockc.asyncio as aio


@contextlib.asynccontextmanager
async def aclient(nodes, **options):
    """A redlockc.asyncio.Client, closed however the block ends."""
    c = aio.Client(nodes, **options)
    try:
        yield c
    finally:
        await c.close()


def subscribers(raw, name):
    """Subscribers of lock name's unlock channel on the server of raw."""
    return raw.pubsub_numsub(f"redisson_lock__channel:{{{name}}}")[0][1]


async def until(condition, timeout=5.0, interval=0.005):
    """Awaits condition() truthy (polled) for at most timeout seconds; its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in range(int(timeout / interval) + 2):
        value = condition()
        if value or loop.time() >= deadline:
            return value
        await asyncio.sleep(interval)
    return condition()


def elsewhere(method, *args, **kwargs):
    """A task of its own that calls method(*args, **kwargs) (lock.acquire, ...)
    and awaits it: another owner than the caller (a hold belongs to the task
    that calls acquire(); asyncio.ensure_future(lock.acquire()) would acquire
    for the caller)."""
    async def run():
        return await method(*args, **kwargs)
    return asyncio.ensure_future(run())
