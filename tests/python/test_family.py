"""The lock family from Python: ReadWriteLock, FairLock, Semaphore,
PermitExpirableSemaphore, MultiLock, on real redis-server processes.

Each test names the behaviour a user could observe; the server's keys are
read with redis-py (how Redisson would see them, docs/FAMILY.md).
"""
import threading
import time

import pytest

import redlockc


def _run_threads(n, target, timeout=30):
    """Starts n threads of target(i); joins them within timeout; re-raises their errors."""
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: B902 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"a thread still runs after {timeout} s"
    if errors:
        raise errors[0]


def _wait_for(cond, timeout=10, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"{what} did not happen within {timeout} s")


# ---- read-write lock ---------------------------------------------------------

def test_readers_overlap_and_the_mode_field_says_read(client, raw):
    rw = client.rwlock("rw-overlap")
    inside = threading.Barrier(4, timeout=10)

    def reader(_):
        with rw.read():
            inside.wait()  # all four hold a read level at the same time
            assert raw.hget("rw-overlap", "mode") == b"read"

    _run_threads(4, reader)
    assert rw.mode is None
    assert raw.exists("rw-overlap") == 0


def test_writer_excludes_readers_and_writers(client):
    rw = client.rwlock("rw-excl")
    intervals = []  # (start, end, kind), recorded while held
    mu = threading.Lock()

    def worker(i):
        side = rw.write() if i % 3 == 0 else rw.read()
        for _ in range(15):
            assert side.acquire(timeout=20)
            try:
                start = time.monotonic()
                time.sleep(0.002)
                end = time.monotonic()
            finally:
                side.release()
            with mu:
                intervals.append((start, end, "write" if i % 3 == 0 else "read"))

    _run_threads(6, worker, timeout=60)
    writes = [iv for iv in intervals if iv[2] == "write"]
    assert len(intervals) == 90
    for w in writes:
        for other in intervals:
            if other is w:
                continue
            overlap = min(w[1], other[1]) - max(w[0], other[0])
            assert overlap <= 0, f"write {w} overlaps {other}"


def test_writer_may_read_and_mode_is_write(client, raw):
    rw = client.rwlock("rw-nest")
    w, r = rw.write(), rw.read()
    with w:
        assert rw.mode == "write"
        with r:  # Redisson's rule: the writer may take read levels
            assert r.hold_count == 1 and w.hold_count == 1
        fields = {k.decode() for k in raw.hkeys("rw-nest")}
        assert f"{client.uuid}:{redlockc.thread_owner()}:write" in fields
    assert rw.mode is None and w.hold_count == 0


def test_read_is_refused_to_another_owner_while_written(client):
    writer = client.rwlock("rw-busy", owner=1)
    reader = client.rwlock("rw-busy", owner=2)
    assert writer.write().acquire(lease=10)
    t0 = time.monotonic()
    assert reader.read().acquire(timeout=0.2) is False
    assert time.monotonic() - t0 >= 0.15
    writer.write().release()
    assert reader.read().acquire(blocking=False)
    reader.read().release()


def test_release_without_hold_raises_not_owner(client):
    with pytest.raises(redlockc.NotOwnerError):
        client.rwlock("rw-none").read().release()
    with pytest.raises(redlockc.NotOwnerError):
        client.rwlock("rw-none").write().release()


def test_bad_lease_is_a_type_error(client):
    with pytest.raises(TypeError):
        client.rwlock("rw-t").read().acquire(lease="5")
    with pytest.raises(redlockc.InvalidArgument):
        client.rwlock("rw-t").write().acquire(lease=-1)


# ---- fair lock ------------------------------------------------------------------

def test_fair_lock_hands_off_in_arrival_order(client, raw):
    holder = client.fair_lock("fair", owner=100)
    assert holder.acquire(lease=30)
    order, started = [], []
    mu = threading.Lock()

    def waiter(i):
        lock = client.fair_lock("fair", owner=i + 1)
        with mu:
            started.append(i)
        assert lock.acquire(timeout=30)
        with mu:
            order.append(i)
        time.sleep(0.01)
        lock.release()

    threads = []
    for i in range(5):  # each joins the queue before the next starts
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        _wait_for(lambda: raw.llen("redisson_lock_queue:{fair}") == i + 1, 10,
                  f"waiter {i} in the queue")
    holder.release()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert order == [0, 1, 2, 3, 4]
    assert raw.llen("redisson_lock_queue:{fair}") == 0


def test_fair_lock_is_reentrant_and_context_managed(client):
    lock = client.fair_lock("fair-re")
    with lock:
        with lock:
            assert lock.hold_count == 2
        assert lock.hold_count == 1
        assert lock.validity > 0
    assert lock.hold_count == 0


def test_fair_lock_over_several_masters_is_refused(servers3, clients):
    c = clients([s.uri for s in servers3])
    with pytest.raises(redlockc.InvalidArgument):
        c.fair_lock("fair")


# ---- semaphores -----------------------------------------------------------------

def test_semaphore_never_gives_out_more_than_its_permits(client, raw):
    sem = client.semaphore("sem", 2)
    assert raw.get("sem") == b"2"
    assert client.semaphore("sem", 5).available == 2  # set only if unset
    held, peak = [0], [0]
    mu = threading.Lock()

    def worker(_):
        s = client.semaphore("sem")
        for _ in range(10):
            assert s.acquire(timeout=30)
            with mu:
                held[0] += 1
                peak[0] = max(peak[0], held[0])
            time.sleep(0.003)
            with mu:
                held[0] -= 1
            s.release()

    _run_threads(5, worker, timeout=60)
    assert peak[0] == 2
    assert sem.available == 2


def test_semaphore_acquire_times_out_and_several_permits_at_once(client):
    sem = client.semaphore("sem2", 3)
    assert sem.acquire(3)
    assert sem.acquire(timeout=0.1) is False
    sem.release(2)
    assert sem.available == 2
    with sem:
        assert sem.available == 1
    assert sem.available == 2
    with pytest.raises(redlockc.InvalidArgument):
        sem.acquire(0)


def test_expired_permit_goes_back_and_its_release_is_lost(client):
    sem = client.permit_semaphore("psem", 1)
    pid = sem.acquire(lease=0.2)
    assert isinstance(pid, str) and len(pid) == 32
    assert sem.acquire(blocking=False, lease=5) is None
    _wait_for(lambda: sem.available == 1, 5, "the expired permit back in the pool")
    with pytest.raises(redlockc.LockLostError):
        sem.release(pid)
    assert sem.available == 1  # the late release added nothing
    with sem.permit(lease=5) as p2:
        assert sem.available == 0 and len(p2) == 32
    assert sem.available == 1


def test_permit_needs_a_lease(client):
    sem = client.permit_semaphore("psem2", 1)
    with pytest.raises(redlockc.InvalidArgument):
        sem.acquire()


def test_semaphores_over_several_masters_are_refused(servers3, clients):
    c = clients([s.uri for s in servers3])
    with pytest.raises(redlockc.InvalidArgument):
        c.semaphore("s")
    with pytest.raises(redlockc.InvalidArgument):
        c.permit_semaphore("s")


# ---- multi-name lock -----------------------------------------------------------

def test_multi_lock_takes_all_names_or_none(client, raw):
    blocker = client.lock("m-c", owner=7)
    assert blocker.acquire(lease=30)
    m = client.multi_lock(["m-a", "m-b", "m-c"], owner=8)
    assert m.acquire(blocking=False) is False
    assert raw.exists("m-a", "m-b") == 0  # no partial hold left
    blocker.release()
    with m:
        assert raw.exists("m-a", "m-b", "m-c") == 3
        assert len(m) == 3
    assert raw.exists("m-a", "m-b", "m-c") == 0


def test_overlapping_multi_locks_do_not_deadlock(client):
    names = [f"ov{i}" for i in range(5)]
    count = [0]
    mu = threading.Lock()

    def worker(i):
        m = client.multi_lock([names[i % 5], names[(i + 1) % 5], names[(i + 3) % 5]])
        for _ in range(20):
            assert m.acquire(timeout=30)
            with mu:
                count[0] += 1
            m.release()

    _run_threads(6, worker, timeout=60)
    assert count[0] == 120


def test_multi_lock_dedups_names_and_checks_them(client):
    m = client.multi_lock(["b", "a", "b"])
    assert m.names == ("a", "b") and len(m) == 2
    with pytest.raises(redlockc.InvalidArgument):
        client.multi_lock([])
    with pytest.raises(TypeError):
        client.multi_lock("ab")


# ---- the client ------------------------------------------------------------------

def test_closed_client_refuses_family_handles(server, clients):
    c = clients(server.uri)
    rw = c.rwlock("closed")
    c.close()
    with pytest.raises(redlockc.ClosedError):
        c.semaphore("s")
    with pytest.raises(redlockc.ClosedError):
        rw.read().acquire()
