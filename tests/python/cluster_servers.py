"""A Redis Cluster for the Python tests: 3 masters and 3 replicas, real
redis-server processes on free 127.0.0.1 ports (each in its own directory),
made with `redis-cli --cluster create`, stopped by their pids.

    cl = RedisCluster().start()
    cl.uri                  # redis-cluster://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c
    cl.master_of(key)       # the RedisServer that owns key's slot now
    cl.stop()
"""
import subprocess

import redis

from redis_servers import FREE_PORT, RedisServer, wait_until


class RedisCluster:
    def __init__(self, masters=3, replicas_per_master=1):
        self.n = masters * (1 + replicas_per_master)
        self.replicas = replicas_per_master
        self.servers = []

    def start(self):
        for _ in range(self.n):
            self.servers.append(RedisServer(
                "--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                # the bus port given, not port + 10000 (taken, or past 65535)
                "--cluster-port", FREE_PORT,
                "--repl-diskless-sync-delay", "0").start())
        args = ["redis-cli", "--cluster", "create"] + \
            [f"127.0.0.1:{s.port}" for s in self.servers] + \
            ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        out = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}{out.stderr}")

        def ok():
            for s in self.servers:
                try:
                    with s.raw() as r:
                        if r.execute_command("CLUSTER", "INFO").decode().find(
                                "cluster_state:ok") < 0:
                            return False
                except redis.RedisError:
                    return False
            return len(self.masters()) == self.n // (1 + self.replicas)
        if not wait_until(ok, timeout=30, interval=0.05):
            self.stop()
            raise RuntimeError("the cluster did not reach cluster_state:ok")
        return self

    @property
    def uri(self):
        seeds = ",".join(f"127.0.0.1:{s.port}" for s in self.masters())
        return f"redis-cluster://{seeds}"

    def masters(self):
        out = []
        for s in self.servers:
            try:
                with s.raw() as r:
                    if r.info("replication").get("role") == "master":
                        out.append(s)
            except redis.RedisError:
                pass
        return out

    def slot_of(self, key):
        with self.servers[0].raw() as r:
            return int(r.execute_command("CLUSTER", "KEYSLOT", key))

    def master_of(self, key):
        slot = self.slot_of(key)
        with self.masters()[0].raw() as r:
            for start, end, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(master[1])
                    return next(s for s in self.servers if s.port == port)
        raise RuntimeError(f"no master for slot {slot}")

    def stop(self):
        for s in self.servers:
            s.stop()
        self.servers = []
