"""redlockc.asyncio asks Redis what the blocking API asks, on real redis-servers.

``await lock.locked()``, ``await lock.ttl()``, ``await lock.force_release()``
and ``await client.fenced_set(key, value, token)``: the blocking Lock's and
Client's calls with the same arguments, answers (seconds) and exceptions,
each one round of the engine. A force release ends the holds its Lock acts
for quietly, as the blocking API forgets its handle's; a cancelled task
leaves no operation behind. Every wait is bounded; nothing asserts on speed.
"""
import asyncio
import math

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, subscribers, until
from redlockc import redlockc_core as core

pytestmark = pytest.mark.asyncio


def nothing_in_flight(c):
    """No operation of c is left in its driver, and its engine is idle."""
    d = c._driver
    return not d.ops and core.rlcpy_engine_idle(d.engine)


# ---- locked() and ttl() -----------------------------------------------------------------

async def test_locked_and_ttl_say_what_the_server_holds(server, raw):
    async with aclient(server.uri) as c:
        lock = c.lock("q")
        assert await lock.locked() is False
        assert await lock.ttl() is None, "no key: None, as the blocking ttl"
        assert await lock.acquire(lease=10)
        assert await lock.locked() is True
        ttl = await lock.ttl()
        assert isinstance(ttl, float) and 5 < ttl <= 10, f"ttl {ttl} s of a 10 s lease"
        raw.persist("q")
        assert await lock.ttl() == math.inf, "no expiry: math.inf"
        await lock.release()
        assert await lock.locked() is False
        raw.hset("q", "someone-else:1", 1)  # another client's hold, Redisson's layout
        assert await c.lock("q").locked() is True, "anyone's hold counts"
        assert await c.lock("q").ttl() == math.inf


async def test_locked_and_ttl_over_three_nodes_follow_the_quorum(servers3):
    raws = [s.raw() for s in servers3]
    try:
        async with aclient([s.uri for s in servers3]) as c:
            lock = c.lock("rq")
            raws[0].hset("rq", "x:1", 1)
            raws[0].pexpire("rq", 60000)
            assert await lock.locked() is False, "one node of three is no quorum"
            assert await lock.ttl() is None
            raws[1].hset("rq", "x:1", 1)
            raws[1].pexpire("rq", 20000)
            assert await lock.locked() is True, "two nodes of three are"
            ttl = await lock.ttl()
            assert 10 < ttl <= 20, f"ttl {ttl} s: the least a quorum (2) still has is ~20 s"
    finally:
        for r in raws:
            r.close()


# ---- force_release() --------------------------------------------------------------------

async def test_force_release_frees_another_clients_hold_and_wakes_its_waiter(server, raw):
    async with aclient(server.uri) as holder_c, aclient(server.uri) as c:
        holder = holder_c.lock("force")
        assert await holder.acquire()
        waiter = asyncio.ensure_future(c.lock("force").acquire(timeout=10))
        assert await until(lambda: subscribers(raw, "force") == 1), "the waiter never waited"
        assert await c.lock("force").force_release() is None
        assert await asyncio.wait_for(waiter, 10) is True, "the waiter was woken and took it"
        assert await until(lambda: holder.lost.is_set()), "the holder never heard of its loss"
        with pytest.raises(aio.LockLostError):
            await holder.release()
        await c.lock("force").force_release()  # its own hold: fine, and gone
        assert not raw.exists("force")
        await c.lock("force").force_release()  # nothing held: still fine


async def test_force_release_ends_the_locks_own_holds_quietly(server, raw):
    # As the blocking API forgets its handle's holds: the owners this Lock
    # acts for (with owner=None every task's) lose nothing loudly: no on_lost,
    # no lost Event, release() is NotOwnerError and the next acquire a new
    # hold. Another explicit owner's hold of the name is found gone, as
    # another client's is.
    async with aclient(server.uri, watchdog_timeout=0.6) as c:
        heard = []
        keep = c.lock("keep")  # a hold that is renewed all along
        assert await keep.acquire()
        mine = c.lock("own")
        mine.on_lost(lambda lk, err: heard.append(("task", lk.name)))
        assert await mine.acquire() and await mine.acquire()
        my_lost = mine.lost
        await mine.force_release()
        assert not raw.exists("own")
        assert mine.owned() is False and mine.hold_count == 0
        with pytest.raises(aio.NotOwnerError):
            await mine.release()

        # Another task's hold, acquired through an owner=None Lock of its own.
        taken, go = asyncio.Event(), asyncio.Event()

        async def another_task():
            lock = c.lock("own2")
            lock.on_lost(lambda lk, err: heard.append(("task", lk.name)))
            assert await lock.acquire()
            taken.set()
            await go.wait()
            assert not lock.owned() and lock.hold_count == 0
            with pytest.raises(aio.NotOwnerError):
                await lock.release()
            return lock.lost.is_set()

        task = asyncio.ensure_future(another_task())
        assert await until(lambda: taken.is_set() or task.done()) and not task.done()
        await c.lock("own2").force_release()  # from this task: every task's hold ends
        assert not raw.exists("own2")
        go.set()
        assert await asyncio.wait_for(task, 10) is False, "its lost Event stays unset"

        # An explicit owner's hold is not one an owner=None Lock acts for.
        other = c.lock("own3", owner=7)
        other.on_lost(lambda lk, err: heard.append((7, lk.name)))
        assert await other.acquire()
        await c.lock("own3").force_release()
        assert await until(lambda: other.lost.is_set()), "owner 7's loss was never reported"
        with pytest.raises(aio.LockLostError):
            await other.release()
        # Its own Lock's force release ends it quietly.
        assert await other.acquire()
        await c.lock("own3", owner=7).force_release()
        with pytest.raises(aio.NotOwnerError):
            await other.release()

        # Let renewals (every 0.2 s) run: only owner 7's first hold was heard of.
        renewals = c.metrics()["renewals"]
        assert await until(lambda: c.metrics()["renewals"] >= renewals + 2 or heard[1:]), \
            "no renewal ran"
        await keep.release()
        assert heard == [(7, "own3")], f"only owner 7's first loss is heard: {heard}"
        assert not my_lost.is_set(), "a hold that ended quietly has its lost Event unset"
        assert await mine.acquire(timeout=0) is True and mine.hold_count == 1, "a new hold"
        await mine.release()
        assert not raw.exists("own")


# ---- fenced_set() -----------------------------------------------------------------------

async def test_fenced_set_writes_the_newest_token_and_refuses_older_ones(server, raw):
    async with aclient(server.uri) as store:
        assert await store.fenced_set("k", b"\x00bytes", 3) is True
        assert raw.get("k") == b"\x00bytes"
        assert await store.fenced_set("k", "str", 3) is True, "the same token writes again"
        assert raw.get("k") == b"str"
        assert await store.fenced_set("k", bytearray(b"ba"), 2) is False, "an older token"
        assert raw.get("k") == b"str" and raw.get("redlockc_fence:{k}") == b"3"
        assert await store.fenced_set("k", memoryview(b"mv"), 2**64 - 1) is True
        assert raw.get("k") == b"mv"


async def test_fenced_set_refuses_bad_arguments_and_a_fence_without_a_token(server, raw):
    async with aclient(server.uri) as store:
        with pytest.raises(aio.InvalidArgument):
            await store.fenced_set("k", "v", 0)
        with pytest.raises(aio.InvalidArgument):
            await store.fenced_set("k", "v", 2**64)
        with pytest.raises(aio.InvalidArgument):
            await store.fenced_set("", "v", 1)
        with pytest.raises(TypeError):
            await store.fenced_set("k", 5, 1)
        with pytest.raises(TypeError):
            await store.fenced_set("k", "v", True)
        with pytest.raises(TypeError):
            await store.fenced_set(b"k", "v", 1)
        raw.set("redlockc_fence:{bad}", "not a token")
        with pytest.raises(aio.ServerError):
            await store.fenced_set("bad", "v", 1)
        assert not raw.exists("k") and not raw.exists("bad"), "nothing refused was written"
        assert await store.fenced_set("k", "v", 1) is True, "the client still works"


async def test_fenced_set_on_a_client_of_three_nodes_is_invalid(servers3):
    async with aclient([s.uri for s in servers3]) as c:
        with pytest.raises(aio.InvalidArgument, match="3 nodes"):
            await c.fenced_set("k", "v", 1)
        assert not any(s.raw().exists("k") for s in servers3)
        assert nothing_in_flight(c)


# ---- a closed client --------------------------------------------------------------------

async def test_a_closed_client_refuses_every_query(server, raw):
    c = aio.Client(server.uri)
    lock = c.lock("closed")
    assert await lock.acquire()
    await c.close()
    calls = {"locked": lock.locked, "ttl": lock.ttl, "force_release": lock.force_release,
             "fenced_set": lambda: c.fenced_set("k", "v", 1)}
    for what, call in calls.items():
        with pytest.raises(aio.ClosedError) as e:
            await call()
        assert e.value.code == core.RLC_E_CLOSED and str(e.value), f"{what}: ClosedError"
    assert raw.exists("closed"), "closing releases nothing; a refused force release neither"
    assert not raw.exists("k")


# ---- cancellation -----------------------------------------------------------------------

async def cancelled_while_the_server_is_paused(server, c, call):
    """Starts call() in a task while server is stopped (its round is written,
    unanswered), cancels that task, then lets the server go on."""
    assert await until(lambda: nothing_in_flight(c)), "an earlier round is still in flight"
    server.pause()
    try:
        task = asyncio.ensure_future(call())
        assert await until(lambda: c._driver.ops, timeout=5), "the round never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        server.resume()


async def test_a_cancelled_query_leaves_nothing_behind(server, raw):
    errors = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda loop, ctx: errors.append(ctx))
    try:
        async with aclient(server.uri) as c:
            lock = c.lock("cq")
            assert await lock.acquire()
            for call in (lock.locked, lock.ttl):
                await cancelled_while_the_server_is_paused(server, c, call)
                assert await until(lambda: nothing_in_flight(c)), "the round was left in flight"
            assert await lock.locked() is True and await lock.ttl() > 0, "later calls answer"
            assert lock.hold_count == 1, "the hold is untouched"
            await lock.release()
            assert not raw.exists("cq")
    finally:
        loop.set_exception_handler(None)
    assert errors == [], f"an answer nobody awaited was reported: {errors}"


async def test_a_cancelled_force_release_still_deletes_and_forgets(server, raw):
    # A force release, like a release, runs to its end in the engine: the key
    # goes, and the holds its Lock acts for end quietly all the same.
    async with aclient(server.uri) as holder_c, aclient(server.uri) as c:
        held = holder_c.lock("cf")
        assert await held.acquire()
        mine = c.lock("cf2")
        assert await mine.acquire()
        await cancelled_while_the_server_is_paused(server, c, c.lock("cf").force_release)
        await cancelled_while_the_server_is_paused(server, c, mine.force_release)
        assert await until(lambda: nothing_in_flight(c)), "a round was left in flight"
        assert not raw.exists("cf") and not raw.exists("cf2"), "the deletes ran"
        assert mine.hold_count == 0 and not mine.lost.is_set()
        with pytest.raises(aio.NotOwnerError):
            await mine.release()
        assert await until(lambda: held.lost.is_set()), "the other client's hold is lost"
        assert await c.lock("cf").acquire(timeout=0), "the lock is free"
        await c.lock("cf").release()


async def test_a_cancelled_fenced_set_runs_to_its_end(server, raw):
    async with aclient(server.uri) as c:
        await cancelled_while_the_server_is_paused(server, c, lambda: c.fenced_set("cs", "v", 5))
        assert await until(lambda: nothing_in_flight(c)), "the write was left in flight"
        assert raw.get("cs") == b"v" and raw.get("redlockc_fence:{cs}") == b"5"
        assert await c.fenced_set("cs", "w", 4) is False, "the fence it wrote holds"


# ---- the same answers as the blocking API -----------------------------------------------

async def test_asyncio_and_blocking_answer_alike_on_one_lock(server, raw, clients):
    blocking = clients(server.uri)
    b_lock = blocking.lock("same")
    async with aclient(server.uri) as c:
        a_lock = c.lock("same")

        async def both():
            """(blocking, asyncio) answers of locked and ttl, ttl in whole seconds."""
            def secs(t):
                return t if t is None or t == math.inf else round(t)
            return ((b_lock.locked(), secs(b_lock.ttl)),
                    (await a_lock.locked(), secs(await a_lock.ttl())))

        b, a = await both()
        assert b == a == (False, None), f"free: blocking {b}, asyncio {a}"
        assert b_lock.acquire(lease=100)
        b, a = await both()
        assert b == a and a[0] is True and 90 <= a[1] <= 100, f"blocking {b}, asyncio {a}"
        raw.persist("same")
        b, a = await both()
        assert b == a == (True, math.inf), f"no expiry: blocking {b}, asyncio {a}"
        b_lock.force_release()
        assert await a_lock.acquire(lease=50)
        b, a = await both()
        assert b == a and a[0] is True and 40 <= a[1] <= 50, f"blocking {b}, asyncio {a}"
        await a_lock.force_release()
        b, a = await both()
        assert b == a == (False, None), f"after asyncio's force release: {b}, {a}"

        # fenced_set: each takes the other's fence as its own.
        assert blocking.fenced_set("res", "b1", 2) is (await c.fenced_set("res", "a1", 2)) is True
        assert blocking.fenced_set("res", "b0", 1) is (await c.fenced_set("res", "a0", 1)) is False
        assert raw.get("res") == b"a1"
        raw.set("redlockc_fence:{bad}", "not a token")
        with pytest.raises(redlockc.ServerError) as be:
            blocking.fenced_set("bad", "v", 1)
        with pytest.raises(aio.ServerError) as ae:
            await c.fenced_set("bad", "v", 1)
        assert type(be.value) is type(ae.value) and be.value.code == ae.value.code
