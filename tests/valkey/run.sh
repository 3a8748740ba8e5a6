#!/usr/bin/env bash
# The "valkey" suite: the same tests, against valkey-server 8 (Debian's
# bookworm-backports) instead of redis-server 7: the plain C suite (the
# simulation aside: it runs no server), the Python suites and the fault
# suite's short profile. The fixtures start the server RLC_SERVER names
# (tests/support/redis_server.c, tests/python/redis_servers.py). The
# library chooses features by probing, never by the server's name or
# version, so nothing else changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${RLC_BUILD_DIR:-$PWD/build}
command -v valkey-server >/dev/null || { echo "valkey-server is not installed (scripts/install-deps.sh)" >&2; exit 1; }
export RLC_SERVER=valkey-server
echo "--- against $(valkey-server --version)"
fail=0
echo "--- C tests (plain build) against Valkey"
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
# Two cases per core: most of them wait on servers and timers.
ctest --test-dir "$BUILD" -L '^c$' -E '^sim\.' -j"$((2 * $(nproc)))" --output-on-failure || fail=1
echo "--- Python tests against Valkey"
bash tests/python/run.sh || fail=1
echo "--- fault suite (short) against Valkey"
bash tests/fault/run.sh short || fail=1
exit $fail
