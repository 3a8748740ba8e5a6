#!/usr/bin/env bash
# The OpenResty benchmark (never part of the test suite; figures only):
#
#   bash tests/bench/openresty/run.sh [--quick]
#
# One nginx worker (Debian's nginx + libnginx-mod-http-lua) against one real
# redis-server, both started here on free loopback ports and stopped by pid.
# Each figure for resty.redlockc (the engine driver) is printed beside the
# same run with resty.redlockc.blocking (1.0's module), both with io and
# connect timeouts of 200 ms:
#   1. stall: p50/p99/max latency of /b/ping (no Redis) on the worker while
#      16 connections loop lock cycles, without and with Redis SIGSTOPped 2 s;
#   2. cycles/s of 64 light threads of one request on 64 distinct locks;
#   3. 10,000 waiting acquires over 100 locks (engine only; --quick: 2,000):
#      all complete; memory per parked waiter; hand-off p50/p99.
# Raw JSON rows and the table go to $RLC_BENCH_BUILD/bench/openresty/
# (default build-bench/).
set -uo pipefail
cd "$(dirname "$0")/../../.."
TOP=$PWD
HERE=$TOP/tests/bench/openresty
BUILD=${RLC_BENCH_BUILD:-$TOP/build-bench}
source "$TOP/tests/lua/servers.sh"

seconds=4 waiters=10000 cyc_seconds=3
if [ "${1:-}" = --quick ]; then seconds=3 waiters=2000 cyc_seconds=1; fi

for tool in nginx redis-server redis-cli curl cmake; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 2; }
done
cmake -S "$TOP" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build "$BUILD" -j2 --target redlockc >/dev/null || { echo "run.sh: build failed" >&2; exit 2; }
LIB=$BUILD/c/libredlockc.so.1
out=$BUILD/bench/openresty
mkdir -p "$out"
: >"$out/rows.jsonl"

work=$(mktemp -d /tmp/rlc-bench-resty-XXXXXX)
NGINX_PID=
cleanup() {
  [ -n "${REDIS_PID:-}" ] && kill -CONT "$REDIS_PID" 2>/dev/null
  if [ -n "$NGINX_PID" ]; then
    kill -QUIT "$NGINX_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$NGINX_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$NGINX_PID" 2>/dev/null
  fi
  redis_stop_all
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

redis_start REDIS || exit 1
PORT=$(free_port) || exit 1
user=
[ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"
mkdir -p "$work/tmp"
sed -e "s|@PREFIX@|$work|g" -e "s|@PORT@|$PORT|g" -e "s|@SRC@|$TOP|g" -e "s|@LIB@|$LIB|g" \
  -e "s|@REDIS_PORT@|$REDIS_PORT|g" -e "s|@USER@|$user|g" "$HERE/nginx.conf.in" >"$work/nginx.conf"
nginx -p "$work" -c "$work/nginx.conf" -e "$work/error.log" &
NGINX_PID=$!
for _ in $(seq 100); do
  [ "$(curl -s --max-time 2 "http://127.0.0.1:$PORT/ping")" = pong ] && break
  sleep 0.1
done
URL=http://127.0.0.1:$PORT

row() { echo "$1" | tee -a "$out/rows.jsonl"; }

echo "--- 1. unrelated requests while Redis is stopped 2 s (16 connections cycling locks)"
for mod in engine blocking; do
  for stall in 0 1; do
    row "$(/usr/bin/python3 "$HERE/stall.py" --port "$PORT" --redis-pid "$REDIS_PID" \
      --mod "$mod" --stall "$stall" --seconds "$seconds")"
  done
done
echo "--- 2. 64 light threads, 64 distinct locks, acquire + release"
for mod in engine blocking; do
  row "$(curl -s --max-time 60 "$URL/b/cycles?mod=$mod&tasks=64&seconds=$cyc_seconds" |
    sed 's/^{/{"row": "cycles64", /')"
done
echo "--- 3. $waiters waiting acquires over 100 locks (engine)"
row "$(curl -s --max-time 300 "$URL/b/waiters?n=$waiters&locks=100" | sed 's/^{/{"row": "waiters", /')"

/usr/bin/python3 "$HERE/table.py" "$out/rows.jsonl" | tee "$out/table.txt"
grep -E '\[(error|crit|alert|emerg)\]' "$work/error.log" | head -5 >"$out/errors.txt"
[ -s "$out/errors.txt" ] && { echo "(nginx logged errors: $out/errors.txt)"; }
exit 0
