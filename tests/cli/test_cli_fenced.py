"""redlockc fenced-set KEY VALUE --token N: a write that a stale lock holder
cannot make. Exit 0 written, 1 refused, 64 usage, 69 Redis unreachable."""
from clitools import free_port, run


def test_fenced_set_writes_with_a_token_at_least_the_fence_and_refuses_less(cli, redis, name):
    r = run(cli, redis.uri, "fenced-set", name, "from 7", "--token", "7")
    assert r.returncode == 0, f"expected exit 0 (written), seen {r.returncode}: {r.stderr}"
    r = run(cli, redis.uri, "fenced-set", "--token", "7", name, "again")
    assert r.returncode == 0, f"equal token: expected exit 0, seen {r.returncode}: {r.stderr}"
    r = run(cli, redis.uri, "fenced-set", name, "stale", "--token", "6")
    assert r.returncode == 1, f"smaller token: expected exit 1, seen {r.returncode}: {r.stderr}"
    assert "refused" in r.stderr
    assert redis.cli("GET", name) == "again"
    assert redis.cli("GET", f"redlockc_fence:{{{name}}}") == "7"


def test_fenced_set_usage_and_unreachable_redis(cli, redis, name):
    for args in (["fenced-set", name, "v"], ["fenced-set", name, "v", "--token", "0"],
                 ["fenced-set", name, "v", "--token", "-3"], ["fenced-set", name, "--token", "1"]):
        r = run(cli, redis.uri, *args)
        assert r.returncode == 64, f"{args}: expected exit 64, seen {r.returncode}: {r.stderr}"
    r = run(cli, f"redis://127.0.0.1:{free_port()}", "fenced-set", name, "v", "--token", "1")
    assert r.returncode == 69, f"expected exit 69, seen {r.returncode}: {r.stderr}"
