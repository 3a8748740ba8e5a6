"""The wire format, seen by redis-py: Redisson's layout, both ways."""
import subprocess
import sys
import threading
import time

import pytest

import redlockc
from redis_servers import wait_until

JAVA_FIELD = "8d0e4c3a-1b2c-4d5e-8f90-a1b2c3d4e5f6:1"

# Another process, holding a lock the way Redisson does (raw redis-py
# commands), until told on stdin to unlock it the way Redisson does.
REDISSON_HOLDER = r"""
import sys, redis
port, name, field = int(sys.argv[1]), sys.argv[2], sys.argv[3]
r = redis.Redis(port=port)
r.hincrby(name, field, 1)
r.pexpire(name, 30000)
print("held", flush=True)
if sys.stdin.readline().strip() == "unlock":
    r.delete(name)
    r.publish("redisson_lock__channel:{%s}" % name, "0")
    print("unlocked", flush=True)
"""

# Redisson's tryLock step, as DESIGN.md section 3 describes it.
REDISSON_TRY_LOCK = """
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
"""


@pytest.fixture
def redisson_holder(server):
    proc = subprocess.Popen([sys.executable, "-c", REDISSON_HOLDER, str(server.port), "shared",
                             JAVA_FIELD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:  # our own child, by its pid
        proc.kill()
    proc.wait(10)
    proc.stdin.close()
    proc.stdout.close()


def test_a_redis_py_process_holding_a_redisson_lock_blocks_us(redisson_holder, client, raw):
    assert redisson_holder.stdout.readline().strip() == "held", "the other process holds it"
    lock = client.lock("shared")
    assert lock.acquire(blocking=False) is False, "Redisson's hold blocks us"
    assert lock.acquire(timeout=0.2) is False, "still blocked after a bounded wait"
    with pytest.raises(redlockc.NotOwnerError):
        lock.release()
    assert raw.hget("shared", JAVA_FIELD) == b"1", "Redisson's hold is intact"
    assert lock.locked() and not lock.owned(), "locked by Redisson, not owned by us"

    got = {}

    def wait_then_look():
        got["ok"] = lock.acquire(timeout=10)
        got["at"] = time.monotonic()
        got["hash"] = raw.hgetall("shared")
        got["field"] = f"{client.uuid}:{redlockc.thread_owner()}".encode()
        if got["ok"]:
            lock.release()

    waiter = threading.Thread(target=wait_then_look)
    waiter.start()
    assert wait_until(lambda: raw.pubsub_numsub("redisson_lock__channel:{shared}")[0][1] == 1,
                      timeout=3), "we never subscribed to Redisson's channel"
    asked = time.monotonic()
    redisson_holder.stdin.write("unlock\n")
    redisson_holder.stdin.flush()
    waiter.join(10)
    assert redisson_holder.stdout.readline().strip() == "unlocked", "the other process unlocked"
    assert got.get("ok") is True, "we take it after Redisson's unlock (DEL + PUBLISH 0)"
    assert got["at"] - asked < 1, f"woke {got['at'] - asked:.3f} s after the unlock was asked"
    assert got["hash"] == {got["field"]: b"1"}, f"then only our field: {got['hash']}"


def test_our_hold_is_redisson_layout_and_blocks_redissons_try_lock(client, raw):
    lock = client.lock("ours")
    lock.acquire(lease=20)
    ours = f"{client.uuid}:{redlockc.thread_owner()}".encode()
    assert raw.hgetall("ours") == {ours: b"1"}, "one field <uuid>:<thread> = 1"
    assert raw.type("ours") == b"hash", "the lock is a hash"
    assert 19000 < raw.pttl("ours") <= 20000, "PTTL is the lease"
    try_lock = raw.register_script(REDISSON_TRY_LOCK)
    pttl = try_lock(keys=["ours"], args=[30000, JAVA_FIELD])
    assert isinstance(pttl, int) and 0 < pttl <= 20000, \
        f"Redisson's tryLock is refused with our PTTL, got {pttl!r}"
    assert raw.hget("ours", JAVA_FIELD) is None, "and wrote nothing"

    with raw.pubsub() as sub:
        sub.subscribe("redisson_lock__channel:{ours}")
        assert sub.get_message(timeout=2)["type"] == "subscribe"
        lock.release()
        message = sub.get_message(timeout=2)
    assert message and message["data"] == b"0", f"unlock message '0', got {message}"
    assert try_lock(keys=["ours"], args=[30000, JAVA_FIELD]) is None, \
        "Redisson takes it after our release"


def test_channel_and_token_keys_keep_existing_braces(server, clients, raw):
    lock = clients(server.uri, fencing=True).lock("{tenant}:job")
    with raw.pubsub() as sub:
        sub.subscribe("redisson_lock__channel:{tenant}:job")
        assert sub.get_message(timeout=2)["type"] == "subscribe"
        lock.acquire()
        assert raw.exists("{tenant}:job") == 1, "the key is the name as given"
        assert raw.exists("redisson_lock_token:{tenant}:job") == 1, "token key, same rule"
        lock.release()
        message = sub.get_message(timeout=2)
    assert message and message["channel"] == b"redisson_lock__channel:{tenant}:job", \
        f"published without added braces: {message}"


def test_fencing_token_is_redissons_counter(server, clients, raw):
    lock = clients(server.uri, fencing=True).lock("fenced")
    lock.acquire()
    assert int(raw.get("redisson_lock_token:{fenced}")) == lock.fencing_token, \
        "the token is the value of redisson_lock_token:{name}"
    lock.release()
