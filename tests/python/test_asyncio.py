"""redlockc.asyncio: the engine on the event loop, against real redis-server processes.

Every wait here is bounded (asyncio.wait_for, or `until` polling a condition
a bounded number of times); nothing asserts on speed.
"""
import asyncio
import logging
import threading

import pytest
import pytest_asyncio  # noqa: F401  (the plugin must be there: without it async tests are skipped)

import redlockc
import redlockc.asyncio as aio
from aio_wait import aclient, elsewhere, subscribers, until

pytestmark = pytest.mark.asyncio


def fields(raw, name):
    return {k.decode(): int(v) for k, v in raw.hgetall(name).items()}


# ---- the basics ------------------------------------------------------------------------

async def test_async_with_takes_and_releases_the_lock(server, raw):
    async with aclient(server.uri) as c:
        lock = c.lock("orders", timeout=5)
        async with lock:
            assert fields(raw, "orders") == {f"{c.uuid}:{lock.owner_id}": 1}, \
                "the hash field is <uuid>:<owner> = 1, Redisson's layout"
            assert lock.owned() and lock.hold_count == 1
            assert raw.pttl("orders") > 20000, "watchdog lease (30 s) on the key"
        assert not raw.exists("orders"), "released at the end of the block"
        assert not lock.owned()


async def test_one_task_is_reentrant_and_another_task_is_excluded(server, raw):
    async with aclient(server.uri) as c:
        a, b = c.lock("re"), c.lock("re")
        assert await a.acquire() and await b.acquire(), "one task nests, through either object"
        assert a.owner_id == b.owner_id, "the task is the owner"
        assert a.hold_count == 2 and fields(raw, "re") == {f"{c.uuid}:{a.owner_id}": 2}
        assert not await elsewhere(a.acquire, timeout=0), "another task is another owner: busy"
        await a.release()
        assert raw.exists("re"), "one level left"
        await b.release()
        assert not raw.exists("re")
        with pytest.raises(aio.NotOwnerError):
            await a.release()

        async def take_and_give_back():
            got = await a.acquire(blocking=False)
            await a.release()
            return got
        assert await asyncio.ensure_future(take_and_give_back()), "free for another task"


async def test_explicit_owner_is_shared_by_lock_objects(server, raw):
    async with aclient(server.uri) as c:
        a, b = c.lock("shared", owner=7), c.lock("shared", owner=7)
        assert await a.acquire() and await b.acquire(timeout=0), "one owner: reentrant"
        assert fields(raw, "shared") == {f"{c.uuid}:7": 2}
        await b.release()
        await a.release()
        assert not raw.exists("shared")


async def test_sync_with_and_async_with_mixups_are_type_errors(server):
    async with aclient(server.uri) as c:
        with pytest.raises(TypeError, match="async with"):
            with c.lock("mix"):
                pass
        assert c.lock("mix").hold_count == 0, "nothing was taken"
    sync = redlockc.Client(server.uri)
    try:
        with pytest.raises(TypeError, match="redlockc.asyncio"):
            async with sync.lock("mix"):
                pass
    finally:
        sync.close()


async def test_fencing_tokens_grow_with_each_new_holder(server):
    async with aclient(server.uri, fencing=True) as c:
        lock = c.lock("fence")
        with pytest.raises(aio.NotOwnerError):
            lock.fencing_token
        tokens = []
        for _ in range(3):
            async with lock:
                tokens.append(lock.fencing_token)
        assert tokens == sorted(tokens) and len(set(tokens)) == 3, f"tokens {tokens}"


# ---- contention ------------------------------------------------------------------------

async def test_ten_tasks_on_one_lock_all_get_it_one_at_a_time(server):
    """The issue's case: asyncio.to_thread(lock.acquire) deadlocked here."""
    async with aclient(server.uri) as c:
        inside, most, done = 0, 0, []

        async def worker(i):
            nonlocal inside, most
            for _ in range(5):
                async with c.lock("orders", timeout=10):
                    inside += 1
                    most = max(most, inside)
                    await asyncio.sleep(0.002)  # widen the window a racing holder would use
                    inside -= 1
            done.append(i)

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(10))), 60)
        assert sorted(done) == list(range(10)), "every task got the lock five times"
        assert most == 1, f"{most} tasks were inside at once"


async def test_a_thousand_waiters_on_few_locks_all_complete(server, raw):
    async with aclient(server.uri) as c:
        counts = {f"many{j}": 0 for j in range(4)}
        inside = {name: 0 for name in counts}
        broken = []

        async def worker(i):
            name = f"many{i % 4}"
            async with c.lock(name, timeout=60):
                inside[name] += 1
                if inside[name] != 1:
                    broken.append(name)
                await asyncio.sleep(0)
                inside[name] -= 1
                counts[name] += 1

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(1200))), 120)
        assert not broken, f"mutual exclusion broken on {set(broken)}"
        assert sum(counts.values()) == 1200 and all(v == 300 for v in counts.values()), counts
        assert not any(raw.exists(n) for n in counts), "all released"


async def test_a_waiter_wakes_on_the_unlock_message(server, raw):
    async with aclient(server.uri) as c:
        holder, waiter = c.lock("wake"), c.lock("wake")
        await holder.acquire()

        async def wait_then_release():  # another task: another owner
            got = await waiter.acquire(timeout=20)
            await waiter.release()
            return got
        task = asyncio.ensure_future(wait_then_release())
        assert await until(lambda: subscribers(raw, "wake") >= 1), "the waiter subscribed"
        assert not task.done()
        await holder.release()
        assert await asyncio.wait_for(task, 5), "woken well before its 20 s timeout"


async def test_bounded_wait_returns_false_and_async_with_raises_not_acquired(server):
    async with aclient(server.uri) as c:
        holder = c.lock("busy")
        await holder.acquire()
        assert await asyncio.wait_for(elsewhere(c.lock("busy").acquire, timeout=0.2), 10) is False

        async def enter(scope):
            async with scope:
                pass
        with pytest.raises(aio.NotAcquiredError):
            await asyncio.wait_for(asyncio.ensure_future(enter(c.lock("busy", timeout=0.1))), 10)
        with pytest.raises(aio.NotAcquiredError):
            await asyncio.wait_for(asyncio.ensure_future(enter(c.lock("busy")(timeout=0))), 10)
        await holder.release()


# ---- cancellation ------------------------------------------------------------------------

async def test_cancelled_waiters_leave_nothing_held(server, raw):
    async with aclient(server.uri) as c:
        holder = c.lock("cancel")
        await holder.acquire()
        waiters = [c.lock("cancel") for _ in range(50)]
        tasks = [elsewhere(w.acquire) for w in waiters]  # each its own owner
        assert await until(lambda: subscribers(raw, "cancel") >= 1), "they wait"
        for t in tasks:
            t.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results[:3]
        await holder.release()
        assert await until(lambda: not raw.exists("cancel")), \
            f"nothing held after the holder left: {fields(raw, 'cancel')}"
        assert all(w.hold_count == 0 for w in waiters)
        # The lock is usable: no cancelled waiter left a queue entry or a hold behind.
        assert await c.lock("cancel").acquire(timeout=2)


async def test_cancel_racing_the_grant_leaves_nothing_held(server, raw):
    """Cancelled after 0, 1, 2... loop iterations: before the command left, while
    the reply is on its way, after the grant reached the future."""
    async with aclient(server.uri) as c:
        for spins in range(40):
            lock = c.lock("race")
            task = asyncio.ensure_future(lock.acquire())
            for _ in range(spins):
                await asyncio.sleep(0)
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                got = None
            if got:  # it finished before the cancel: ours to release
                await lock.release()
            assert await until(lambda: not raw.exists("race")), \
                f"held after a cancel at {spins} iterations: {fields(raw, 'race')}"


async def test_wait_for_timeout_cancels_the_wait(server, raw):
    async with aclient(server.uri) as c:
        holder = c.lock("wf")
        await holder.acquire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(elsewhere(c.lock("wf").acquire), 0.2)
        await holder.release()
        assert await until(lambda: not raw.exists("wf"))


# ---- leases, extend, lost holds ---------------------------------------------------------

async def test_the_watchdog_renews_on_the_loop_past_its_lease(server, raw):
    async with aclient(server.uri, watchdog_timeout=0.6) as c:
        lock = c.lock("renewed")
        await lock.acquire()
        loop = asyncio.get_running_loop()
        end = loop.time() + 1.5  # 2.5 leases: only renewals keep it
        lowest = 600
        while loop.time() < end:
            lowest = min(lowest, raw.pttl("renewed"))
            await asyncio.sleep(0.05)
        assert lowest > 0, f"the key expired (pttl {lowest}) though the watchdog should renew it"
        assert lock.owned() and not lock.lost.is_set()
        await lock.release()
        assert not raw.exists("renewed")


async def test_extend_sets_a_fixed_lease_and_none_hands_back_to_the_watchdog(server, raw):
    async with aclient(server.uri, watchdog_timeout=3) as c:
        lock = c.lock("ext")
        await lock.acquire(lease=1)
        assert raw.pttl("ext") <= 1000
        await lock.extend(20)
        assert 10000 < raw.pttl("ext") <= 20000, "a fixed 20 s lease"
        await lock.extend(None)
        assert raw.pttl("ext") <= 3000, "back to the watchdog's 3 s lease"
        with pytest.raises(aio.NotOwnerError):
            await elsewhere(c.lock("ext").extend, 5)  # another task: not its hold
        await lock.release()


async def test_a_fixed_lease_expires_and_a_waiter_takes_over(server, raw):
    async with aclient(server.uri) as c:
        first = c.lock("lease")
        assert await first.acquire(lease=0.3)
        assert 0 < raw.pttl("lease") <= 300
        second = c.lock("lease")

        async def take_over():  # another task: another owner
            got = await second.acquire(timeout=10)
            await second.release()
            return got
        assert await asyncio.wait_for(asyncio.ensure_future(take_over()), 10), \
            "taken once the 0.3 s lease ran out (no unlock message comes)"
        assert not first.owned()
        with pytest.raises(aio.LockLostError):
            await first.release()


async def test_lost_when_the_key_is_deleted_callback_event_and_task_cancel(server, raw):
    async with aclient(server.uri, watchdog_timeout=0.6) as c:
        lock = c.lock("gone")
        seen = []
        lock.on_lost(lambda lk, err: seen.append((lk, err, threading.get_ident())))
        await lock.acquire()
        assert not lock.lost.is_set()

        task = asyncio.ensure_future(asyncio.sleep(30))
        lock.cancel_on_lost(task)  # by the owner (this task): its hold
        assert raw.delete("gone") == 1
        await asyncio.wait_for(lock.lost.wait(), 5)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        assert await until(lambda: seen), "on_lost ran"
        lk, err, ident = seen[0]
        assert lk is lock and isinstance(err, aio.LockLostError), repr(err)
        assert ident == threading.get_ident(), "on the loop's thread"
        assert not lock.owned() and isinstance(lock.lost_error, aio.LockLostError)
        with pytest.raises(aio.LockLostError):
            await lock.release()
        assert await lock.acquire(timeout=2), "a new hold"
        assert not lock.lost.is_set() and lock.owned(), "a new hold clears the lost state"
        await lock.release()


async def test_a_deleted_key_is_pushed_not_found_at_the_next_renewal(server, raw):
    # 30 s lease: the next renewal is 10 s away; loss push (CLIENT TRACKING on a
    # pair of the engine's own) says it within a round trip.
    async with aclient(server.uri, watchdog_timeout=30) as c:
        lock = c.lock("pushed")
        await lock.acquire()
        # the hold joins loss push after its 50 ms grace; the key is then tracked
        assert await until(lambda: int(raw.info("stats")["tracking_total_keys"]) >= 1), \
            "the lock key was never registered for tracking"
        assert raw.delete("pushed") == 1
        await asyncio.wait_for(lock.lost.wait(), 2)
        assert isinstance(lock.lost_error, aio.LockLostError), repr(lock.lost_error)
        with pytest.raises(aio.LockLostError):
            await lock.release()


async def test_a_node_that_refuses_loss_push_is_logged_once(server, raw, caplog):
    # An ACL user without +client: CLIENT ID is refused, so loss push falls
    # back to renewal time on this node, and the engine's warning reaches
    # the "redlockc" logger, as the blocking client's does.
    raw.execute_command("ACL", "SETUSER", "nc", "on", ">pw", "~*", "&*", "+@all", "-client")
    uri = f"redis://nc:pw@127.0.0.1:{server.port}"
    with caplog.at_level(logging.WARNING, logger="redlockc"):
        async with aclient(uri, watchdog_timeout=0.9) as c:
            lock = c.lock("refused")
            await lock.acquire()
            for _ in range(300):
                if any("loss_push" in r.getMessage() for r in caplog.records):
                    break
                await asyncio.sleep(0.01)
            assert raw.delete("refused") == 1
            await asyncio.wait_for(lock.lost.wait(), 5)  # found at the renewal
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "redlockc" and "loss_push" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "refused" in warnings[0] and "client" in warnings[0], warnings[0]


async def test_loss_push_off_finds_the_loss_at_the_renewal(server, raw):
    async with aclient(server.uri, watchdog_timeout=0.9, loss_push=0) as c:
        lock = c.lock("unpushed")
        await lock.acquire()
        assert raw.delete("unpushed") == 1
        await asyncio.wait_for(lock.lost.wait(), 5)  # the renewal, every 0.3 s
        assert int(raw.info("clients")["tracking_clients"]) == 0


async def test_lost_when_the_server_is_stopped(server):
    async with aclient(server.uri, watchdog_timeout=0.6, io_timeout=0.2,
                       connect_timeout=0.2) as c:
        lock = c.lock("down")
        await lock.acquire()
        server.kill()
        await asyncio.wait_for(lock.lost.wait(), 10)
        assert isinstance(lock.lost_error, aio.Error), repr(lock.lost_error)


# ---- several nodes, other clients ----------------------------------------------------------

async def test_redlock_over_three_nodes(servers3):
    raws = [s.raw() for s in servers3]
    try:
        # Short timeouts: close() waits (bounded by them) for the release that
        # the killed node never answers.
        opts = dict(io_timeout=0.5, connect_timeout=0.3)
        async with aclient([s.uri for s in servers3], **opts) as c, \
                aclient([s.uri for s in servers3], **opts) as other:
            assert c.quorum == 2
            lock = c.lock("red")
            async with lock:
                held = sum(bool(r.exists("red")) for r in raws)
                assert held == 3, f"held on {held} of 3 nodes"
                assert not await other.lock("red").acquire(timeout=0), "busy for another client"
            assert not any(r.exists("red") for r in raws), "released on every node"
            servers3[2].kill()
            async with c.lock("red", timeout=5):  # 2 of 3 is a quorum
                assert sum(bool(r.exists("red")) for r in raws[:2]) == 2
    finally:
        for r in raws:
            r.close()


async def test_excludes_the_blocking_api_on_the_same_name(server, raw):
    sync = redlockc.Client(server.uri)
    loop = asyncio.get_running_loop()
    try:
        async with aclient(server.uri) as c:
            slock = sync.lock("both", owner=3)  # released from an executor thread
            assert slock.acquire(blocking=False)
            alock = c.lock("both")
            assert not await alock.acquire(timeout=0), "the blocking API's hold excludes us"
            task = asyncio.ensure_future(alock.acquire(timeout=20))
            assert await until(lambda: subscribers(raw, "both") >= 1)
            await loop.run_in_executor(None, slock.release)
            assert await asyncio.wait_for(task, 5), "woken by the blocking API's unlock message"
            other = sync.lock("both", owner=5)
            assert not await loop.run_in_executor(None, lambda: other.acquire(timeout=0))
            waiting = loop.run_in_executor(None, lambda: other.acquire(timeout=20))
            await until(lambda: subscribers(raw, "both") >= 1)
            await alock.release()
            assert await asyncio.wait_for(waiting, 5), "our unlock message wakes a blocking waiter"
            other.release()
    finally:
        sync.close()


async def test_a_server_stopped_mid_wait_ends_the_wait_with_an_error(server, raw):
    async with aclient(server.uri, io_timeout=0.3, connect_timeout=0.3) as c:
        holder = c.lock("stop")
        await holder.acquire()
        task = elsewhere(c.lock("stop").acquire, timeout=8)
        assert await until(lambda: subscribers(raw, "stop") >= 1)
        server.kill()
        try:
            got = await asyncio.wait_for(task, 20)
        except aio.Error as e:
            got = e
        assert isinstance(got, aio.ConnectionError), \
            f"the wait ends with the connection's error (well before its 8 s), got {got!r}"


async def test_reconnects_after_a_server_restart(server, raw):
    async with aclient(server.uri, connect_timeout=0.5) as c:
        lock = c.lock("again")
        async with lock:
            pass
        server.restart()  # the same port: the old connections are dead
        ok = False
        for _ in range(20):  # the first try may find the dead socket
            try:
                ok = await asyncio.wait_for(lock.acquire(timeout=2), 10)
                break
            except aio.ConnectionError:
                continue
        assert ok, "acquired again after the restart"
        await lock.release()


async def test_a_stalled_server_is_given_up_then_reconnected(server):
    async with aclient(server.uri, io_timeout=0.3, connect_timeout=0.3) as c:
        lock = c.lock("paused")
        async with lock:
            pass
        given_up, give_up = [], c._driver._give_up
        c._driver._give_up = lambda k: (given_up.append(k), give_up(k))
        server.pause()
        try:
            with pytest.raises(aio.Error):
                await asyncio.wait_for(lock.acquire(timeout=1), 10)
            # The engine gives the silent connection up (want_open -1) after
            # the call's deadline plus connect_timeout; the driver closes it.
            assert await until(lambda: 0 in given_up, timeout=5), \
                "the stalled command connection was not given up"
        finally:
            server.resume()
        ok = False
        for _ in range(20):  # the stalled attempt may be undone first
            try:
                ok = await asyncio.wait_for(lock.acquire(timeout=2), 10)
                break
            except aio.Error:
                continue
        assert ok, "acquired once the server answers again"
        assert lock.validity > 0
        await lock.release()


# ---- resources ----------------------------------------------------------------------------

async def test_waiting_tasks_start_no_threads(server, raw):
    async with aclient(server.uri) as c:
        holder = c.lock("threads")
        await holder.acquire()  # connects first (asyncio may resolve with a thread)
        before = threading.active_count()
        tasks = [elsewhere(c.lock("threads").acquire, timeout=30) for _ in range(100)]
        assert await until(lambda: subscribers(raw, "threads") >= 1)
        for _ in range(20):
            await asyncio.sleep(0)
        assert threading.active_count() == before, \
            f"{threading.active_count() - before} threads started for 100 waiters"
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await holder.release()


async def test_close_ends_waits_with_closed_error(server, raw):
    c = aio.Client(server.uri)
    holder = c.lock("closing")
    await holder.acquire()
    task = elsewhere(c.lock("closing").acquire)
    assert await until(lambda: subscribers(raw, "closing") >= 1), "it waits"
    await asyncio.wait_for(c.close(), 10)
    with pytest.raises(aio.ClosedError):
        await asyncio.wait_for(task, 5)
    with pytest.raises(aio.ClosedError):
        await holder.release()
    assert c.closed
