"""redlockc in the foreground of an interactive shell, on a pseudo-terminal:
CMD gets the terminal, Ctrl-C reaches CMD once (not once from the terminal
and once more forwarded), Ctrl-Z stops the job and fg continues it."""
import os
import pty
import re
import select
import time

import pytest

from clitools import wait_until


class Shell:
    """An interactive bash on a pty; every read is bounded."""

    def __init__(self):
        env = dict(os.environ, PS1="$ ", TERM="dumb")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.seen = ""

    def send(self, text):
        os.write(self.fd, text.encode())

    def expect(self, pattern, timeout=10):
        deadline = time.monotonic() + timeout
        while not (m := re.search(pattern, self.seen)):
            left = deadline - time.monotonic()
            assert left > 0, f"expected /{pattern}/ on the terminal; seen: {self.seen!r}"
            if select.select([self.fd], [], [], min(left, 0.1))[0]:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:
                    pass
        self.seen = self.seen[m.end():]
        return m

    def close(self):
        try:
            self.send("exit\n")
        except OSError:
            pass
        for _ in range(100):  # 1 s, then SIGKILL
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                break
            time.sleep(0.01)
        else:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def shell():
    s = Shell()
    yield s
    s.close()


def terminal_foreground(pid):
    """The foreground process group of pid's terminal (/proc: tpgid)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(")")[-1].split()[5])


def run_in_shell(shell, cli, redis, name, tmp_path):
    """Starts CMD under the lock; returns when CMD's group has the terminal.
    CMD logs each SIGINT; after one it leaves time for a duplicate delivery
    to show up, then exits 5."""
    log, pidfile = tmp_path / "log", tmp_path / "pid"
    cmd = (f'echo $$ > {pidfile}; trap "echo INT >> {log}; sleep 0.3; exit 5" INT;'
           " i=0; while [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exit 9")
    # bash, not dash: dash vfork()s its commands, and a Ctrl-Z that stops the
    # vfork child before it execs leaves dash waiting, unstoppable, for it.
    shell.send(f"{cli} --nodes {redis.uri} {name} -- bash -c '{cmd}'\n")
    wait_until(lambda: redis.cli("EXISTS", name) == "1", what="the lock to be held")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), what="CMD's pid")
    pid = int(pidfile.read_text())
    wait_until(lambda: terminal_foreground(pid) == pid, what="CMD to have the terminal")
    return log, pid


def exit_status(shell):
    shell.send("echo rc=$?\n")
    return int(shell.expect(r"rc=(\d+)").group(1))


def test_ctrl_c_reaches_cmd_once_and_the_lock_is_released(shell, cli, redis, name, tmp_path):
    log, _ = run_in_shell(shell, cli, redis, name, tmp_path)
    shell.send("\x03")
    status = exit_status(shell)
    assert status == 5, f"CMD's status after its INT trap: expected 5, seen {status}"
    assert log.read_text() == "INT\n", f"SIGINT delivered once: seen {log.read_text()!r}"
    assert redis.cli("EXISTS", name) == "0", "the lock is released"


def test_ctrl_z_stops_the_job_and_fg_continues_it(shell, cli, redis, name, tmp_path):
    log, pid = run_in_shell(shell, cli, redis, name, tmp_path)
    shell.send("\x1a")
    shell.expect(r"Stopped")
    shell.send("echo jobs:; jobs\n")
    shell.expect(r"jobs:\s*\r?\n\[1\]\+\s+Stopped")
    assert redis.cli("EXISTS", name) == "1", "still held while stopped"
    shell.send("fg\n")
    wait_until(lambda: terminal_foreground(pid) == pid, what="CMD to have the terminal again")
    shell.send("\x03")
    status = exit_status(shell)
    assert status == 5, f"the continued CMD got Ctrl-C: expected 5, seen {status}"
    assert log.read_text() == "INT\n", f"SIGINT delivered once: seen {log.read_text()!r}"
    assert redis.cli("EXISTS", name) == "0", "the lock is released"
