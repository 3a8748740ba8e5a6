"""A real PostgreSQL 15 server for tests: initdb in a temp dir, postgres on a free
loopback port, stopped by pid. As root it runs as the user "postgres" (initdb
refuses root)."""
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

from redis_servers import free_port, wait_until


def pg_bindir():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not dirs:
        raise RuntimeError("no PostgreSQL server: apt-get install postgresql-15")
    return dirs[-1]


class PgServer:
    def __init__(self):
        self.bindir = pg_bindir()
        self.dir = tempfile.mkdtemp(prefix="rlc-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = None
        self.proc = None
        self.user = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            self.user = (pw.pw_uid, pw.pw_gid)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _run_as(self):
        return dict(user=self.user[0], group=self.user[1], extra_groups=[]) if self.user else {}

    def start(self):
        subprocess.run([os.path.join(self.bindir, "initdb"), "-D", self.data, "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.dir,
                       **self._run_as())
        for _ in range(5):  # a port may be taken between free_port() and the bind
            self.port = free_port()
            self.proc = subprocess.Popen(
                [os.path.join(self.bindir, "postgres"), "-D", self.data, "-p", str(self.port),
                 "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                cwd=self.dir, **self._run_as())
            if wait_until(lambda: self.proc.poll() is not None or self._ready(), timeout=30,
                          interval=0.05) and self.proc.poll() is None:
                return self
        raise RuntimeError("postgres did not start")

    def _ready(self):
        return subprocess.run([os.path.join(self.bindir, "pg_isready"), "-h", "127.0.0.1",
                               "-p", str(self.port), "-t", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

    def dsn(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
