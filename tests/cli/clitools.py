"""Helpers for the redlockc CLI tests: real redis-server processes on free
loopback ports (never 6379), nothing on disk, stopped by pid; running the CLI
from $RLC_BUILD_DIR (default: build/ at the top of the tree)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("RLC_BUILD_DIR", os.path.join(TOP, "build"))
CLI = os.path.join(BUILD, "c", "tools", "redlockc")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout=10.0, what="condition"):
    """Polls cond() until it is true; bounded. Returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            assert v, f"timed out after {timeout} s waiting for {what}"
            return v
        time.sleep(0.01)


class Redis:
    """One redis-server; cli() runs a raw command through redis-cli."""

    def __init__(self, *extra, port=None):
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="rlc-cli-redis-")
        self.proc = None
        for _ in range(1 if port else 5):  # another process may take the port first
            self.port = port or free_port()
            if self._spawn():
                self.uri = f"redis://127.0.0.1:{self.port}"
                return
        raise RuntimeError("redis-server did not start")

    def _spawn(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", self.dir, "--logfile", "redis.log"] + self.extra)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                    s.sendall(b"PING\r\n")
                    reply = s.recv(64)
                    if reply.startswith(b"+PONG") or b"NOAUTH" in reply:
                        return True
            except OSError:
                pass
            time.sleep(0.01)
        self.stop_process()
        return False

    def cli(self, *args, password=None):
        cmd = ["redis-cli", "-h", "127.0.0.1", "-p", str(self.port)]
        if password:
            cmd += ["--no-auth-warning", "-a", password]
        r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip()

    def stop_process(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def stop(self):
        self.stop_process()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(cli, nodes, *args, timeout=30, **kw):
    """redlockc --nodes NODES ARGS...; the finished process (text output)."""
    return subprocess.run([cli, "--nodes", nodes] + list(args), capture_output=True,
                          text=True, timeout=timeout, **kw)


def start(cli, nodes, *args, **kw):
    """redlockc --nodes NODES ARGS... in the background."""
    return subprocess.Popen([cli, "--nodes", nodes] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def finish(proc, timeout=15):
    """Waits (bounded) for a started redlockc: (status, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"redlockc still ran after {timeout} s; stderr: {err}")
    return proc.returncode, out, err


def hold_raw(redis, name, ms=30000):
    """Another owner holds `name`, written as Redisson writes it."""
    redis.cli("HSET", name, "00000000-0000-4000-8000-000000000000:1", "1")
    redis.cli("PEXPIRE", name, ms)


def is_waiting(redis, name):
    """True once a waiter subscribed to the lock's unlock channel."""
    out = redis.cli("PUBSUB", "NUMSUB", "redisson_lock__channel:{%s}" % name)
    return out.split("\n")[-1].strip() == "1"


def gone(pid):
    """True once the process pid is no more (or a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Lines:
    """The lines a started redlockc prints, read by a thread as they come."""

    def __init__(self, proc):
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, word, after=0, what=None):
        """Waits (bounded) for a line past index `after` holding word; its index."""
        def found():
            return next((i for i, l in enumerate(list(self.lines)) if i >= after and word in l),
                        None)
        wait_until(lambda: found() is not None, what=what or f"a line with {word!r}: "
                   f"{self.lines}")
        return found()

    def finish(self, timeout=15):
        """Waits (bounded) for the process and the last lines: (status, stderr)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"redlockc still ran after {timeout} s: {self.lines}")
        self.thread.join(5)
        return self.proc.returncode, self.proc.stderr.read()


def status_and_watch_follow_a_holder(cli, nodes, name, *opts):
    """status, status --json and watch on NODES (any URI form the library
    takes): free, then held by another redlockc (a watchdog lease), then
    free again. Returns watch's lines."""
    r = run(cli, nodes, *opts, "status", name)
    assert r.returncode == 1 and r.stdout.splitlines() == [f"name: {name}", "locked: no"], \
        f"free: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}"
    r = run(cli, nodes, *opts, "status", "--json", name)
    assert r.returncode == 1 and json.loads(r.stdout) == \
        {"name": name, "locked": False, "pttl_ms": -2}, f"{r.stdout!r} {r.stderr!r}"
    watch = Lines(start(cli, nodes, *opts, "watch", name))
    holder = None
    try:
        free_at = watch.wait_for(" free", what="watch says the lock is free")
        holder = start(cli, nodes, *opts, name, "--", "sleep", "30")
        held_at = watch.wait_for(" held, lease ", after=free_at + 1, what="watch sees the holder")
        r = run(cli, nodes, *opts, "status", name)
        got = dict(line.split(": ", 1) for line in r.stdout.splitlines())
        assert r.returncode == 0 and got["name"] == name and got["locked"] == "yes", \
            f"held: exit {r.returncode}, {got}, stderr {r.stderr!r}"
        assert 0 < int(got["pttl_ms"]) <= 30000, f"a watchdog lease: {got}"
        r = run(cli, nodes, *opts, "status", "--json", name)
        got = json.loads(r.stdout)
        assert r.returncode == 0 and got["locked"] is True and 0 < got["pttl_ms"] <= 30000, got
        holder.send_signal(signal.SIGTERM)  # passed on to sleep; the lock is released
        status, _, err = finish(holder)
        assert status == 128 + signal.SIGTERM, f"holder: {status} {err}"
        watch.wait_for(" free", after=held_at + 1, what="watch sees the release")
    finally:
        if holder and holder.poll() is None:
            holder.kill()
            holder.wait(5)
        watch.proc.send_signal(signal.SIGTERM)
    status, err = watch.finish()
    assert status == 0 and "stopped by signal 15" in watch.lines[-1], \
        f"watch ends with 0 on SIGTERM: {status} {watch.lines} {err!r}"
    assert not any("cannot ask" in line for line in watch.lines), watch.lines
    return watch.lines
