"""A Sentinel group for the Python tests: a master, a replica and three
sentinels, all real processes on free 127.0.0.1 ports, stopped by their pids.

    group = SentinelGroup(name="mymaster").start()
    group.uri          # redis-sentinel://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/mymaster
    group.failover()   # SENTINEL FAILOVER, returns once every sentinel names the new master
    group.stop()

down-after-milliseconds and failover-timeout are short so that a failover
takes about a second, not the defaults' minutes.
"""
import os
import shutil
import subprocess
import tempfile

import redis

from redis_servers import SERVER, RedisServer, free_port, wait_until


class Sentinel:
    """One redis-server --sentinel process with its own config file."""

    def __init__(self, master_port, name, quorum, password=None):
        self.dir = tempfile.mkdtemp(prefix="rlc-sentinel-")
        self.conf = os.path.join(self.dir, "sentinel.conf")
        self.master_port, self.name, self.quorum = master_port, name, quorum
        self.password = password
        self.port = None
        self.proc = None

    def start(self):
        for _ in range(5):
            self.port = free_port()
            lines = [f"port {self.port}", "bind 127.0.0.1", "protected-mode no",
                     f"dir {self.dir}", "logfile sentinel.log",
                     f"sentinel monitor {self.name} 127.0.0.1 {self.master_port} {self.quorum}",
                     f"sentinel down-after-milliseconds {self.name} 600",
                     f"sentinel failover-timeout {self.name} 3000",
                     f"sentinel parallel-syncs {self.name} 1"]
            if self.password:
                lines.append(f"requirepass {self.password}")
            with open(self.conf, "w") as f:
                f.write("\n".join(lines) + "\n")
            self.proc = subprocess.Popen([SERVER, self.conf, "--sentinel"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            if wait_until(lambda: self.proc.poll() is not None or self.master() is not None,
                          timeout=10, interval=0.01) and self.proc.poll() is None:
                return self
            self.stop(keep_dir=True)
        raise RuntimeError("redis-sentinel did not start")

    def client(self):
        return redis.Redis(port=self.port, password=self.password, socket_timeout=2,
                           decode_responses=True)

    def master(self):
        """(host, port) this sentinel names as the master, or None."""
        try:
            with self.client() as r:
                got = r.execute_command("SENTINEL", "get-master-addr-by-name", self.name)
                return (got[0], int(got[1])) if got else None
        except (redis.RedisError, OSError):
            return None

    def stop(self, keep_dir=False):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class SentinelGroup:
    def __init__(self, name="mymaster", sentinels=3, sentinel_password=None, data_password=None):
        self.name = name
        # Redis 7 waits 5 s before a diskless full sync: the replica would
        # have nothing for the first seconds.
        extra = ["--repl-diskless-sync-delay", "0"]
        if data_password:
            extra += ["--requirepass", data_password, "--masterauth", data_password]
        self.data_password = data_password
        self.master = RedisServer(*extra)
        self.replica = None
        self.extra = extra
        self.n_sentinels = sentinels
        self.sentinel_password = sentinel_password
        self.sentinels = []

    def start(self):
        self.master.start()
        self.replica = RedisServer("--replicaof", "127.0.0.1", self.master.port, *self.extra)
        self.replica.start()
        with self.replica.raw() as r:
            if not wait_until(lambda: r.info("replication").get("master_link_status") == "up",
                              timeout=15, interval=0.02):
                self.stop()
                raise RuntimeError("the replica did not sync with the master")
        for _ in range(self.n_sentinels):
            self.sentinels.append(Sentinel(self.master.port, self.name, 2,
                                           self.sentinel_password).start())
        # Every sentinel knows the replica and the other sentinels before a
        # failover can be asked for.
        def ready():
            for s in self.sentinels:
                try:
                    with s.client() as r:
                        info = r.execute_command("SENTINEL", "master", self.name)
                        d = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
                        if int(d.get("num-slaves", 0)) < 1 or \
                                int(d.get("num-other-sentinels", 0)) < self.n_sentinels - 1:
                            return False
                except (redis.RedisError, OSError):
                    return False
            return True
        if not wait_until(ready, timeout=20, interval=0.05):
            self.stop()
            raise RuntimeError("the sentinels did not see each other and the replica")
        return self

    @property
    def uri(self):
        seeds = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        auth = f":{self.data_password}@" if self.data_password else ""
        return f"redis-sentinel://{auth}{seeds}/{self.name}"

    def current_master(self):
        return self.sentinels[0].master()

    def server_at(self, port):
        return self.master if self.master.port == port else self.replica

    def failover(self, timeout=20):
        """SENTINEL FAILOVER; returns the new master's server once every
        sentinel that runs names it and it says it is a master."""
        old = self.current_master()
        with self.sentinels[0].client() as r:
            r.execute_command("SENTINEL", "FAILOVER", self.name)

        def done():
            names = {s.master() for s in self.sentinels if s.proc is not None}
            if len(names) != 1 or old in names or None in names:
                return False
            new = self.server_at(next(iter(names))[1])
            try:
                with new.raw() as c:
                    return c.info("replication").get("role") == "master"
            except redis.RedisError:
                return False
        if not wait_until(done, timeout=timeout, interval=0.05):
            raise RuntimeError("the failover did not complete")
        return self.server_at(self.current_master()[1])

    def stop(self):
        for s in self.sentinels:
            s.stop()
        self.sentinels = []
        for srv in (self.replica, self.master):
            if srv is not None:
                srv.stop()
