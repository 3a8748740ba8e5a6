"""Real redis-server processes for the Python tests (and the Python benchmark).

Each server runs on a free 127.0.0.1 port with --save "" --appendonly no, in
its own temporary directory, and is stopped by its pid. Nothing here ever
kills a process it did not start.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis

# The server to test against: redis-server, or valkey-server (RLC_SERVER; the
# "valkey" suite of tests/run_all.sh).
SERVER = os.environ.get("RLC_SERVER") or "redis-server"


FREE_PORT = "FREE_PORT"  # in RedisServer's arguments: a free port picked at each start attempt


def free_port():
    """A port the kernel just handed out on 127.0.0.1 (free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout=3.0, interval=0.002):
    """Polls condition() until it is truthy or timeout seconds passed; returns its last value."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / interval) + 2):
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
    return condition()


class RedisServer:
    """One redis-server process. start() picks a free port; stop() ends it by pid."""

    def __init__(self, *extra_args):
        self.extra_args = [str(a) for a in extra_args]
        self.dir = tempfile.mkdtemp(prefix="rlc-py-")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.port = None
        self.proc = None
        self.args = list(self.extra_args)
        self.password = None
        if "--requirepass" in self.extra_args:
            self.password = self.extra_args[self.extra_args.index("--requirepass") + 1]

    @property
    def uri(self):
        return f"redis://127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        # A port may be taken between free_port() and the bind: try a few.
        # FREE_PORT (a cluster bus port) is a new free port each attempt, as
        # the one that failed may be the taken one; a restart keeps it.
        for _ in range(5):
            self.port = free_port()
            self.args = [free_port() if a == FREE_PORT else a for a in self.extra_args]
            self.args = [str(a) for a in self.args]
            conf = os.path.join(self.dir, "nodes.conf")  # a failed attempt's identity
            if os.path.exists(conf):
                os.unlink(conf)
            if self._spawn():
                return self
        raise RuntimeError("redis-server did not start")

    def _spawn(self):
        args = [SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.dir, "--unixsocket", self.socket, "--unixsocketperm", "700",
                "--logfile", "redis.log", "--protected-mode", "no", *self.args]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        up = wait_until(lambda: self.proc.poll() is not None or self.ping(), timeout=10,
                        interval=0.01)
        if up and self.proc.poll() is None:
            return True
        self.kill()
        return False

    def ping(self):
        """True if the server answers (NOAUTH from a password-protected one counts)."""
        try:
            with redis.Redis(port=self.port, socket_timeout=0.2, socket_connect_timeout=0.2) as r:
                return r.ping()
        except redis.AuthenticationError:
            return True
        except redis.ResponseError as e:
            return "NOAUTH" in str(e)
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return False

    def raw(self, **kwargs):
        """A redis-py client of this server (raw commands, to look at it as anyone would)."""
        return redis.Redis(port=self.port, password=self.password, socket_timeout=5, **kwargs)

    def kill(self):
        """SIGKILL (a crash); the port may be reused by restart()."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self):
        self.kill()
        for _ in range(20):  # the old socket may linger a moment
            if self._spawn():
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not restart")

    def pause(self):
        if self.proc:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        if self.proc:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class TlsRedisServer(RedisServer):
    """A redis-server with a TLS port besides its plain one (for looking)."""

    def __init__(self, certs, auth_clients, *extra):
        super().__init__(*extra)
        self.certs = certs
        self.auth_clients = auth_clients
        self.tls_port = None

    def _spawn(self):
        self.tls_port = free_port()
        c = self.certs
        self.args = self._base_args + [
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", f"{c}/server.crt", "--tls-key-file", f"{c}/server.key",
                "--tls-ca-cert-file", f"{c}/ca.crt",
                "--tls-auth-clients", "yes" if self.auth_clients else "no"]
        return super()._spawn()

    def start(self):
        self._base_args = [str(a) for a in self.extra_args]
        return super().start()

    def tls_uri(self, host="127.0.0.1", password=True):
        auth = f":{self.password}@" if password and self.password else ""
        return f"rediss://{auth}{host}:{self.tls_port}"
