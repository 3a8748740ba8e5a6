"""Bounded waiting for the asyncio tests."""
import asyncio


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
