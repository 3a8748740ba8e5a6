"""redlockc with a redis-sentinel:// node: the command runs holding the lock on
the master that the sentinel names (a master and one sentinel, real processes
stopped by pid)."""
import os
import shutil
import subprocess
import tempfile

import pytest

from clitools import free_port, run, status_and_watch_follow_a_holder, wait_until


@pytest.fixture
def sentinel(redis):
    """A sentinel monitoring the module's server as master "mym"."""
    d = tempfile.mkdtemp(prefix="rlc-cli-sentinel-")
    conf = os.path.join(d, "sentinel.conf")
    with open(conf, "w") as f:
        f.write(f"sentinel monitor mym 127.0.0.1 {redis.port} 1\n")
    port = free_port()
    proc = subprocess.Popen(["redis-server", conf, "--sentinel", "--port", str(port),
                             "--bind", "127.0.0.1", "--daemonize", "no", "--dir", d,
                             "--logfile", "sentinel.log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def answers():
        r = subprocess.run(["redis-cli", "-p", str(port), "SENTINEL",
                            "get-master-addr-by-name", "mym"],
                           capture_output=True, text=True, timeout=5)
        return str(redis.port) in r.stdout
    try:
        wait_until(answers, what="the sentinel to answer")
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(d, ignore_errors=True)


def test_cmd_runs_holding_the_lock_on_the_master_the_sentinel_names(cli, redis, sentinel,
                                                                       name):
    nodes = f"redis-sentinel://127.0.0.1:{sentinel}/mym"
    r = run(cli, nodes, name, "--", "redis-cli", "-p", str(redis.port), "exists", name)
    assert r.returncode == 0, f"stdout: {r.stdout}\nstderr: {r.stderr}"
    assert r.stdout.strip() == "1", "CMD saw the lock held on the master"
    assert redis.cli("EXISTS", name) == "0", "released after CMD"


def test_an_unknown_master_name_is_unavailable_naming_it(cli, sentinel, name):
    # Unreachable nodes are retried until the wait ends (-w), then exit 69.
    r = run(cli, f"redis-sentinel://127.0.0.1:{sentinel}/nosuch", "-v", "-w", "1s", name,
            "--", "true")
    assert r.returncode == 69 and "knows no master named 'nosuch'" in r.stderr, r.stderr


def test_status_and_watch_ask_the_master_the_sentinel_names(cli, sentinel, name):
    status_and_watch_follow_a_holder(cli, f"redis-sentinel://127.0.0.1:{sentinel}/mym", name)
