"""redlockc status NAME, redlockc release --force NAME, and the documentation:
--help, the man page and the README section name the same options and exit
codes."""
import gzip
import os
import re
import subprocess

from clitools import BUILD, TOP, finish, free_port, hold_raw, is_waiting, run, start, wait_until


def status_lines(out):
    return dict(line.split(": ", 1) for line in out.strip().split("\n"))


def test_status_of_a_held_lock_prints_locked_and_pttl(cli, redis, name):
    hold_raw(redis, name, ms=20000)
    r = run(cli, redis.uri, "status", name)
    assert r.returncode == 0, f"locked: expected exit 0, seen {r.returncode}: {r.stderr}"
    got = status_lines(r.stdout)
    assert got["name"] == name and got["locked"] == "yes", f"seen {got}"
    assert 0 < int(got["pttl_ms"]) <= 20000, f"pttl_ms: expected (0, 20000], seen {got}"


def test_status_of_a_free_lock_exits_1(cli, redis, name):
    r = run(cli, redis.uri, "status", name)
    assert r.returncode == 1, f"free: expected exit 1, seen {r.returncode}: {r.stderr}"
    assert status_lines(r.stdout) == {"name": name, "locked": "no"}, f"seen {r.stdout!r}"


def test_status_without_redis_exits_69(cli, name):
    r = run(cli, f"redis://127.0.0.1:{free_port()}", "status", name)
    assert r.returncode == 69, f"expected exit 69, seen {r.returncode}: {r.stderr}"


def test_status_over_three_nodes_counts_a_quorum(cli, make_redis, name):
    nodes = [make_redis() for _ in range(3)]
    uris = ",".join(n.uri for n in nodes)
    hold_raw(nodes[0], name)
    r = run(cli, uris, "status", name)
    assert r.returncode == 1, f"held on 1 of 3: expected exit 1 (not locked), seen {r.returncode}"
    hold_raw(nodes[1], name)
    r = run(cli, uris, "status", name)
    assert r.returncode == 0, f"held on 2 of 3: expected exit 0 (locked), seen {r.returncode}"


def test_release_force_deletes_the_lock_whoever_holds_it(cli, redis, name):
    hold_raw(redis, name)
    r = run(cli, redis.uri, "release", "--force", name)
    assert r.returncode == 0, f"expected exit 0, seen {r.returncode}: {r.stderr}"
    assert r.stdout.strip() == f"released lock '{name}'", f"seen {r.stdout!r}"
    assert redis.cli("EXISTS", name) == "0", "the key is deleted"
    r = run(cli, redis.uri, "release", name, "--force")
    assert r.returncode == 0, f"again: expected exit 0, seen {r.returncode}"
    assert r.stdout.strip() == f"lock '{name}' was not held", f"seen {r.stdout!r}"


def test_a_waiter_gets_the_lock_after_release_force(cli, redis, name):
    hold_raw(redis, name, ms=60000)
    waiter = start(cli, redis.uri, "--wait", "20", name, "--", "sh", "-c", "exit 3")
    wait_until(lambda: is_waiting(redis, name), what="the waiter to subscribe")
    assert run(cli, redis.uri, "release", "--force", name).returncode == 0
    status, _, err = finish(waiter)
    assert status == 3, f"the waiter ran CMD: expected 3, seen {status}: {err}"


def test_version(cli):
    r = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    assert re.fullmatch(r"redlockc \d+\.\d+\.\d+ \(libredlockc \d+\.\d+\.\d+\)\n", r.stdout), \
        f"seen {r.stdout!r}"


# ---- the documentation agrees with itself -------------------------------------------

def help_text(cli):
    r = subprocess.run([cli, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("Usage: redlockc"), r.stdout
    return r.stdout


def man_text():
    path = os.path.join(BUILD, "c", "tools", "redlockc.1.gz")
    with gzip.open(path, "rt") as f:
        return f.read().replace("\\-", "-").replace("\\fB", "").replace("\\fR", "") \
            .replace("\\fI", "")


def section(text, start, end=None):
    i = text.index(start)
    j = text.index(end, i) if end else len(text)
    return text[i:j]


def options(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))


def test_help_and_man_page_name_the_same_options(cli):
    in_help = options(section(help_text(cli), "Options:", "Exit status:"))
    in_man = options(section(man_text(), ".SH OPTIONS", ".SH SIGNALS"))
    assert in_help == in_man, f"--help only: {in_help - in_man}; man only: {in_man - in_help}"
    assert {"--wait", "--lease", "--nodes", "--options", "--kill-after"} <= in_help


def exit_codes_help(cli):
    block = section(help_text(cli), "Exit status:")
    return set(int(c) for c in re.findall(r"^  (\d+)\s", block, re.M))


def test_help_man_page_and_readme_list_the_same_exit_codes(cli):
    in_help = exit_codes_help(cli)
    man = section(man_text(), ".SH EXIT STATUS", ".SH EXAMPLES")
    in_man = set(int(c) for c in re.findall(r"^\.B (\d+)$", man, re.M))
    readme = section(open(os.path.join(TOP, "README.md")).read(),
                     "| exit |")
    in_readme = set(int(c) for c in re.findall(r"^\| (\d+) ", readme, re.M))
    assert in_help == {64, 69, 70, 75, 79, 126, 127}, f"--help lists {sorted(in_help)}"
    assert in_man == in_help, f"man page: {sorted(in_man)}, --help: {sorted(in_help)}"
    assert in_readme == in_help, f"README: {sorted(in_readme)}, --help: {sorted(in_help)}"
