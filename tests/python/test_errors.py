"""Failures: each status code's exception, and bad input from Python (never a crash)."""
import collections
import gc
import math
import threading
import time

import pytest

import redlockc
from redis_servers import wait_until


# ---- failures of the server or the network -------------------------------------

def test_unreachable_server_raises_connection_error_promptly(server, clients):
    lock = clients(server.uri, io_timeout=0.2, connect_timeout=0.2).lock("down")
    server.kill()
    t0 = time.monotonic()
    with pytest.raises(redlockc.ConnectionError) as e:
        lock.acquire(blocking=False)
    assert e.value.code == -3 and "127.0.0.1" in str(e.value), f"names the node: {e.value}"
    assert isinstance(e.value, ConnectionError) and isinstance(e.value, OSError), \
        "also the built-in ConnectionError"
    with pytest.raises(redlockc.ConnectionError):
        lock.acquire(timeout=1)
    assert time.monotonic() - t0 < 1, "no waiting on a connection that is refused"
    server.restart()
    assert lock.acquire(blocking=False), "works again once the server is back"
    lock.release()


def test_paused_server_raises_timeout_error(server, clients):
    lock = clients(server.uri, io_timeout=0.2, connect_timeout=0.1).lock("paused")
    lock.acquire(lease=60)  # connected
    server.pause()
    try:
        t0 = time.monotonic()
        with pytest.raises(redlockc.TimeoutError) as e:
            lock.release()
        took = time.monotonic() - t0
    finally:
        server.resume()
    # Not before io_timeout; the upper bound only says "no hang" (busy machine).
    assert 0.19 <= took < 1.5, f"timed out after {took:.3f} s, io_timeout 0.2 s"
    assert isinstance(e.value, TimeoutError) and e.value.code == -4, "also the built-in TimeoutError"


def test_wrong_type_key_raises_server_error_and_is_untouched(client, raw):
    raw.set("orders", "not-a-lock")
    lock = client.lock("orders")
    with pytest.raises(redlockc.ServerError) as e:
        lock.acquire()
    assert "WRONGTYPE" in str(e.value) and "orders" in str(e.value), f"message: {e.value}"
    with pytest.raises(redlockc.ServerError):
        lock.release()
    assert raw.get("orders") == b"not-a-lock", "the string is untouched"


def test_authentication(start_server, clients):
    s = start_server("--requirepass", "s3cret-pw")
    with pytest.raises(redlockc.AuthenticationError) as e:
        clients(s.uri).lock("x").acquire()
    assert "NOAUTH" in str(e.value), f"message: {e.value}"
    with pytest.raises(redlockc.AuthenticationError) as e:
        clients(f"redis://:wrong-pw@127.0.0.1:{s.port}").lock("x").acquire()
    assert "wrong-pw" not in str(e.value), f"the message leaks the password: {e.value}"
    lock = clients(f"redis://:s3cret-pw@127.0.0.1:{s.port}/2").lock("x")
    assert lock.acquire(), "the right password works"
    lock.release()


# ---- a closed client -----------------------------------------------------------------

def test_cancelled_error_names_the_status():
    assert redlockc.CancelledError.status == -12
    assert issubclass(redlockc.CancelledError, redlockc.Error)
    assert "CancelledError" in redlockc.__all__


def test_closing_a_client_with_live_locks_is_safe(server, raw):
    client = redlockc.Client(server.uri)
    held, idle = client.lock("close"), client.lock("idle")
    held.acquire(lease=2)
    client.close()
    client.close()  # idempotent
    assert client.closed, "closed after close()"
    calls = {"release": held.release, "acquire": idle.acquire, "locked": held.locked,
             "owned": held.owned, "hold_count": lambda lock=held: lock.hold_count,
             "ttl": lambda lock=held: lock.ttl, "force_release": held.force_release,
             "extend": lambda lock=held: lock.extend(1)}
    for what, call in calls.items():
        with pytest.raises(redlockc.ClosedError) as e:
            call()
        assert e.value.code == -10 and str(e.value), f"{what}: ClosedError with a message"
    calls.clear()
    with pytest.raises(redlockc.ClosedError, match="closed"):
        client.lock("new")
    assert raw.exists("close") == 1, "closing does not release on the server"
    del client, held, idle
    gc.collect()  # frees the handles after their client: nothing dangles


def test_closing_a_client_wakes_its_waiters_with_closed_error(client, raw):
    raw.hset("busy", "someone:1", 1)  # held, with no expiry
    lock = client.lock("busy")
    got = {}

    def wait():
        try:
            got["result"] = lock.acquire(timeout=10)
        except redlockc.Error as e:
            got["error"] = e
        got["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert wait_until(lambda: raw.pubsub_numsub("redisson_lock__channel:{busy}")[0][1] == 1,
                      timeout=3), "the waiter never subscribed"
    closed = time.monotonic()
    client.close()
    waiter.join(10)
    assert isinstance(got.get("error"), redlockc.ClosedError), f"the waiter got {got}"
    assert got["at"] - closed < 1, f"woken {got['at'] - closed:.3f} s after close()"


def test_closing_a_client_while_threads_use_its_locks(server):
    client = redlockc.Client(server.uri)
    outcome, done = {}, [0]
    cycling = threading.Barrier(9)

    def cycle(index):
        lock = client.lock(f"busy{index % 3}")  # three names: waits and hand-offs too
        lock.on_lost(lambda lock, error: None)
        cycling.wait(10)
        for _ in range(100000):  # ends with ClosedError, long before this bound
            try:
                if lock.acquire(timeout=0.05):
                    lock.release()
                    done[0] += 1
            except redlockc.ClosedError:
                outcome[index] = "closed"
                return
            except redlockc.Error as e:  # NotOwnerError etc. would be a bug
                outcome[index] = repr(e)
                return
        outcome[index] = "never closed"

    threads = [threading.Thread(target=cycle, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    cycling.wait(10)
    assert wait_until(lambda: done[0] > 50, timeout=10), f"the threads are cycling: {done[0]}"
    client.close()  # while the threads are inside acquire() and release()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "every thread returned after close()"
    assert outcome == {i: "closed" for i in range(8)}, f"each thread ends with ClosedError: {outcome}"
    del client
    gc.collect()  # frees the handles: nothing dangles


def test_client_as_context_manager_closes(server):
    with redlockc.Client(server.uri) as client:
        lock = client.lock("cm")
        assert lock.acquire(), "acquired inside the with block"
    assert client.closed, "the with block closed the client"
    with pytest.raises(redlockc.ClosedError):
        lock.release()


# ---- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("nodes, error", [
    (None, TypeError), (123, TypeError), ([], redlockc.InvalidArgument),
    ([None], TypeError), ("", redlockc.InvalidArgument), ("bogus://x", redlockc.InvalidArgument),
    ("redis://127.0.0.1:99999", redlockc.InvalidArgument),
    ("redis://a\0b", redlockc.InvalidArgument), (["redis://\udcff"], redlockc.InvalidArgument),
    (b"redis://127.0.0.1", TypeError), ([b"redis://127.0.0.1"], TypeError),
    (iter([]), redlockc.InvalidArgument),
])
def test_bad_nodes(nodes, error):
    with pytest.raises(error) as e:
        redlockc.Client(nodes)
    assert str(e.value), "the exception says what is wrong"


@pytest.mark.parametrize("make", [
    tuple, iter, collections.deque, dict.fromkeys, lambda uris: (u for u in uris),
], ids=["tuple", "iterator", "deque", "dict", "generator"])
def test_nodes_may_be_any_iterable_of_uris(server, clients, make):
    client = clients(make([server.uri]))
    assert client.nodes == (server.uri,), f"nodes {client.nodes}"
    lock = client.lock("iterable")
    assert lock.acquire(blocking=False), "the client works"
    lock.release()


@pytest.mark.parametrize("options, error, text", [
    ({"unknown_option": 1}, TypeError, "unknown_option"),
    ({"watchdog_timeout": -1}, redlockc.InvalidArgument, "watchdog_timeout"),
    ({"watchdog_timeout": "30"}, TypeError, "watchdog_timeout"),
    ({"io_timeout": math.nan}, redlockc.InvalidArgument, "io_timeout"),
    ({"io_timeout": math.inf}, redlockc.InvalidArgument, "io_timeout"),
    ({"pool_size": 1.5}, TypeError, "pool_size"),
    ({"pool_size": 0}, redlockc.InvalidArgument, "pool_size"),
    ({"drift_factor": "x"}, TypeError, "drift_factor"),
    ({"key_prefix": "a;b"}, redlockc.InvalidArgument, "key_prefix"),
    ({"key_prefix": 5}, TypeError, "key_prefix"),
    ({"key_prefix": "\udcff"}, redlockc.InvalidArgument, "UTF-8"),
    ({"io_timeout": 0}, redlockc.InvalidArgument, "io_timeout must be from 0.001 to 3600 seconds"),
    ({"watchdog_timeout": 0.005}, redlockc.InvalidArgument, "from 0.01 to 86400 seconds"),
    ({"drift_factor": 0.6}, redlockc.InvalidArgument, "drift_factor"),
    ({"io_timeout_ms": 0.5}, TypeError, "io_timeout_ms"),
    ({"io_timeout_ms": 0}, redlockc.InvalidArgument, "io_timeout_ms"),
    ({"loss_push": 2}, TypeError, "loss_push must be True or False"),
    ({"restart_guard": "yes"}, TypeError, "restart_guard"),
    ({"sync_replicas": 1.5}, TypeError, "sync_replicas"),
    ({"sync_replicas": -1}, redlockc.InvalidArgument, "sync_replicas"),
])
def test_bad_options(server, options, error, text):
    with pytest.raises(error) as e:
        redlockc.Client(server.uri, **options)
    assert text in str(e.value), f"the message names the option: {e.value}"


def test_options_in_seconds_are_accepted(server, clients, raw):
    client = clients(server.uri, watchdog_timeout=2.5, io_timeout=0.5, node_timeout=0.05,
                     connect_timeout=1, retry_jitter=0.01, drift_factor=0.02, pool_size=2,
                     key_prefix="p:")
    lock = client.lock("opts")
    lock.acquire()
    assert 2000 < raw.pttl("p:opts") <= 2500, "watchdog_timeout=2.5 s is a 2500 ms lease"
    lock.release()
    assert clients(server.uri, watchdog_timeout=None).lock("n").acquire(), "None: default"
    assert clients(server.uri, drift_factor=1e-5).lock("tiny").acquire(), \
        "a drift factor Python prints as 1e-05 reaches the library as a plain decimal"


def test_switches_and_replica_sync_are_passed_on(server, clients, raw):
    # loss_push=False: no tracking pair; the loss is found at the renewal
    client = clients(server.uri, watchdog_timeout=0.9, loss_push=False, restart_guard=True,
                     sync_replicas=0, sync_timeout=0.5)
    lost = threading.Event()
    lock = client.lock("switches")
    lock.on_lost(lambda *_: lost.set())
    assert lock.acquire()
    assert raw.delete("switches") == 1
    assert lost.wait(5), "found lost at the renewal"
    assert int(raw.info("clients")["tracking_clients"]) == 0, "loss_push=False tracks nothing"


def test_options_by_their_c_names_are_milliseconds(server, clients, raw):
    lock = clients(server.uri, watchdog_timeout_ms=2500, io_timeout_ms=500).lock("ms")
    lock.acquire()
    assert 2000 < raw.pttl("ms") <= 2500, "watchdog_timeout_ms=2500 is a 2500 ms lease"
    lock.release()


def test_every_option_of_the_c_table_is_a_client_keyword(server, clients):
    """Client()'s keywords come from the C library's one option table
    (rlc_option_describe): an option added there needs no Python edit. Each
    is given at its default (in seconds for a *_ms one)."""
    from redlockc import redlockc_core as core
    i, given = 0, {}
    while (line := core.rlc_option_describe(i)) is not None:
        name, kind, rng, default = line.split(" ", 3)
        i += 1
        if default in ("-", "auto") or name.startswith("tls_"):
            continue  # the library chooses; TLS ones need a rediss:// node
        if name.endswith("_ms"):
            given[name[:-3]] = int(default) / 1000
        elif kind == "int" and rng == "0..1":
            given[name] = default == "1"
        elif kind == "int":
            given[name] = int(default)
        elif kind == "fraction":
            given[name] = float(default)
        else:
            given[name] = default
    assert {"watchdog_timeout", "format", "fencing", "drift_factor"} <= set(given), given
    for name, value in given.items():
        clients(server.uri, **{name: value})  # accepted, by its keyword


def test_key_prefix_and_names_are_used_byte_for_byte(server, clients, raw):
    lock = clients(server.uri, key_prefix=" ключ=1: ").lock("заказ {x}")
    assert lock.acquire(), "acquired"
    key = " ключ=1: заказ {x}".encode()  # the prefix (spaces kept) + the name, in UTF-8
    assert raw.type(key) == b"hash", f"no lock hash at {key!r}; keys: {raw.keys()}"
    assert raw.hgetall(key) == {f"{lock.client.uuid}:{redlockc.thread_owner()}".encode(): b"1"}, \
        "our field, count 1"
    lock.release()
    assert raw.exists(key) == 0, "released"


@pytest.mark.parametrize("name, owner, error", [
    (None, None, TypeError), (123, None, TypeError), (b"bytes", None, TypeError),
    ("", None, redlockc.InvalidArgument), ("a\0b", None, redlockc.InvalidArgument),
    ("x" * 70000, None, redlockc.InvalidArgument), ("\udcff", None, redlockc.InvalidArgument),
    ("ok", "1", TypeError), ("ok", 1.0, TypeError), ("ok", True, TypeError),
    ("ok", 0, redlockc.InvalidArgument), ("ok", -1, redlockc.InvalidArgument),
    ("ok", 2**64, redlockc.InvalidArgument), ("ok", 2**62, redlockc.InvalidArgument),
])
def test_bad_lock_names_and_owners(client, name, owner, error):
    with pytest.raises(error) as e:
        client.lock(name, owner)
    assert str(e.value), "the exception says what is wrong"


def test_a_lock_needs_a_client():
    with pytest.raises(TypeError, match="Client"):
        redlockc.Lock("redis://127.0.0.1:6379", "name")


def test_explicit_owner_ids_stop_below_the_thread_ids(client):
    # The library gives threads ids from 2**62 up; explicit ones stay below.
    lock = client.lock("big", owner=2**62 - 1)
    assert lock.acquire(blocking=False), "owner 2**62-1 is the largest explicit one"
    lock.release()
    with pytest.raises(redlockc.InvalidArgument, match="too large"):
        client.lock("big", owner=2**62)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"lease": -1}, redlockc.InvalidArgument, "lease"),
    ({"lease": 0}, redlockc.InvalidArgument, "lease"),
    ({"lease": math.nan}, redlockc.InvalidArgument, "lease"),
    ({"lease": math.inf}, redlockc.InvalidArgument, "lease"),
    ({"lease": "10"}, TypeError, "lease"),
    ({"lease": 10**9}, redlockc.InvalidArgument, "366 days"),
    ({"timeout": -5}, ValueError, "timeout"),
    ({"timeout": "1"}, TypeError, "timeout"),
    ({"blocking": False, "timeout": 1}, ValueError, "non-blocking"),
])
def test_bad_acquire_arguments(client, raw, kwargs, error, text):
    lock = client.lock("args")
    with pytest.raises(error) as e:
        lock.acquire(**kwargs)
    assert text in str(e.value), f"message: {e.value}"
    assert raw.exists("args") == 0, "nothing was written"


@pytest.mark.parametrize("seconds, error", [
    (-1, redlockc.InvalidArgument), (0, redlockc.InvalidArgument), ("5", TypeError),
])
def test_bad_extend_arguments(client, seconds, error):
    lock = client.lock("ext")
    lock.acquire()
    with pytest.raises(error):
        lock.extend(seconds)
    lock.release()


@pytest.mark.parametrize("seconds", [1e300, 2.0**63 / 1000, 10**9, 31622400.001])
def test_leases_over_366_days_are_refused_in_seconds(client, raw, seconds):
    # In ms these would be clamped or overflow, and the C library's message
    # would name a number of ms the caller never wrote.
    lock = client.lock("long")
    with pytest.raises(redlockc.InvalidArgument) as e:
        lock.acquire(lease=seconds)
    said = str(e.value)
    assert f"lease of {seconds!r} seconds is longer than 366 days" in said and " ms" not in said, \
        f"acquire: told in the seconds given: {said}"
    assert raw.exists("long") == 0, "nothing was written"
    assert lock.acquire(lease=60)
    with pytest.raises(redlockc.InvalidArgument) as e:
        lock.extend(seconds)
    said = str(e.value)
    assert f"of {seconds!r} seconds is longer than 366 days" in said and " ms" not in said, \
        f"extend: told in the seconds given: {said}"
    assert 50000 < raw.pttl("long") <= 60000, "the 60 s lease is unchanged"
    lock.release()


def test_a_lease_of_366_days_is_the_longest(client, raw):
    lock = client.lock("longest")
    assert lock.acquire(lease=366 * 86400), "366 days, the library's limit"
    assert raw.pttl("longest") > 366 * 86400 * 1000 - 60000, f"PTTL {raw.pttl('longest')}"
    lock.extend(366 * 86400)
    lock.release()


def test_a_lease_too_short_for_the_drift_allowance_is_refused_in_seconds(client, raw):
    lock = client.lock("short")
    with pytest.raises(redlockc.InvalidArgument) as e:
        lock.acquire(lease=0.002)
    assert str(e.value).startswith("lease of 0.002 seconds"), f"led by the seconds given: {e.value}"
    assert lock.acquire(lease=60)
    with pytest.raises(redlockc.InvalidArgument) as e:
        lock.extend(0.002)
    assert str(e.value).startswith("extend's lease of 0.002 seconds"), f"extend: {e.value}"
    lock.release()


def test_a_lost_lock_says_so_once(server, clients, raw):
    # The detail repeats the status's phrase in its own words; the message
    # is the detail alone, not "phrase: detail".
    fixed = clients(server.uri).lock("once")
    fixed.acquire(lease=60)
    raw.delete("once")
    with pytest.raises(redlockc.LockLostError) as e:
        fixed.release()  # the server says it is gone
    said = str(e.value)
    assert said.count("expired or was taken") == 1 and "'once'" in said, f"message: {said}"
    assert said == e.value.detail and e.value.code == -6, f"detail {e.value.detail!r}"

    renewed = clients(server.uri, watchdog_timeout=0.3).lock("once")
    renewed.acquire()
    raw.delete("once")
    assert wait_until(lambda: renewed.validity == 0, timeout=3), "the watchdog saw it gone"
    with pytest.raises(redlockc.LockLostError) as e:
        renewed.release()  # known lost already: nothing is sent
    said = str(e.value)
    assert said.count("expired or was taken") == 1 and "'once'" in said, f"message: {said}"


def test_invalid_argument_is_a_value_error_with_code_and_the_c_detail():
    with pytest.raises(ValueError) as e:
        redlockc.Client("bogus://x")
    assert isinstance(e.value, redlockc.InvalidArgument) and isinstance(e.value, redlockc.Error)
    assert e.value.code == -1, f"code {e.value.code}"
    assert "bogus://x" in e.value.detail, f"rlc_errmsg() names the URI: {e.value.detail!r}"
    assert str(e.value) == e.value.message == e.value.detail, \
        f"the library's detail is the message: {e.value}"
