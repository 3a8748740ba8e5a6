#!/usr/bin/env bash
# The OpenResty suite (bash tests/run_all.sh openresty): a real nginx
# (Debian's nginx + libnginx-mod-http-lua, one worker, in the foreground on a
# free loopback port, temporary prefix, stopped by its pid) serving
# tests/openresty/app.lua, which uses resty.redlockc from the source tree and
# libredlockc.so.1 from RLC_BUILD_DIR (default build/), against a real
# redis-server. Checks:
#   - resty.redlockc's error names are redlockc.h's; results and errors of
#     its methods in a request (/selftest);
#   - 200 concurrent requests that each lock, GET a counter, ngx.sleep, SET
#     it plus one, and unlock end with the counter at exactly 200, with 200
#     distinct owners and never two requests inside the critical section;
#   - while one request waits for a lock held elsewhere, the worker answers
#     other requests; the waiter gets the lock once it is free, and a wait
#     that runs out answers "busy";
#   - the lock family (tests/openresty/family_app.lua): each type's results
#     in a request; concurrent readers overlap and writers are alone; a
#     semaphore of 3 never has more than 3 holders.
# Fails (never skips) when nginx, its Lua module, curl or the library is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
TOP=$PWD
HERE=$TOP/tests/openresty
BUILD=${RLC_BUILD_DIR:-$TOP/build}
LIB=$BUILD/c/libredlockc.so.1
source "$TOP/tests/lua/servers.sh"

passed=0
failed=0
pass() { echo "ok - $1"; passed=$((passed + 1)); }
fail() { echo "not ok - $1: expected $2, saw $3"; failed=$((failed + 1)); }
expect_eq() { if [ "$2" == "$3" ]; then pass "$1"; else fail "$1" "'$2'" "'$3'"; fi; }
expect_match() { if [[ $3 =~ $2 ]]; then pass "$1"; else fail "$1" "a match of /$2/" "'$3'"; fi; }

missing=()
for tool in nginx curl redis-server redis-cli; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
for f in /usr/lib/nginx/modules/ndk_http_module.so /usr/lib/nginx/modules/ngx_http_lua_module.so \
  /usr/share/lua/5.1/resty/core.lua "$LIB"; do
  [ -e "$f" ] || missing+=("$f")
done
if ((${#missing[@]})); then
  echo "FAIL - missing: ${missing[*]}"
  echo "       (apt-get install nginx libnginx-mod-http-lua curl redis-server; build $BUILD)"
  exit 1
fi

work=$(mktemp -d /tmp/rlc-openresty-XXXXXX)
prefix=$work/nginx
NGINX_PID=
stop_nginx() {
  [ -n "$NGINX_PID" ] || return 0
  kill -QUIT "$NGINX_PID" 2>/dev/null # graceful: the worker finishes, exits
  local i
  for i in $(seq 100); do # 10 s, then SIGKILL
    kill -0 "$NGINX_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$NGINX_PID" 2>/dev/null
  wait "$NGINX_PID" 2>/dev/null
  NGINX_PID=
}
cleanup() {
  stop_nginx
  redis_stop_all
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM # so that the EXIT trap runs on these too

redis_start REDIS || { echo "FAIL - redis-server did not start"; exit 1; }
PORT=$(free_port) || { echo "FAIL - no free port"; exit 1; }
URL=http://127.0.0.1:$PORT

# As root, nginx would switch its worker to "nobody", who may not read the
# work tree: keep the worker as whoever runs the test.
user=
[ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"
mkdir -p "$prefix/tmp"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@PORT@|$PORT|g" -e "s|@SRC@|$TOP|g" \
  -e "s|@LIB@|$LIB|g" -e "s|@REDIS_PORT@|$REDIS_PORT|g" -e "s|@USER@|$user|g" \
  "$HERE/nginx.conf.in" >"$prefix/nginx.conf"

echo "--- nginx on 127.0.0.1:$PORT, prefix $prefix"
nginx -p "$prefix" -c "$prefix/nginx.conf" -e "$prefix/error.log" &
NGINX_PID=$!
up=
for i in $(seq 100); do # 10 s
  kill -0 "$NGINX_PID" 2>/dev/null || break
  if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/ping")" = 200 ]; then
    up=1
    break
  fi
  sleep 0.1
done
if [ -z "$up" ]; then
  echo "FAIL - nginx did not answer /ping; its error log:"
  cat "$prefix/error.log"
  exit 1
fi

echo "--- error names"
# The statuses: RLC_NOT_ACQUIRED and RLC_E_* (not RLC_M_* / RLC_LOG_* of 1.1).
header=$(grep -o 'RLC_[A-Z_]* = -\?[0-9]*' "$TOP/c/include/redlockc.h" | sed 's/^RLC_//; s/ = /=/' |
  grep -E '^(NOT_ACQUIRED|E_[A-Z_]+)=' | LC_ALL=C sort | xargs)
expect_eq "resty.redlockc.errors is redlockc.h's statuses without RLC_" "$header" \
  "$(curl -s --max-time 5 "$URL/errors" | LC_ALL=C sort | xargs)"

echo "--- results and errors in a request"
expect_eq "/selftest (reentrancy, busy, errors, raises)" "selftest done" \
  "$(curl -s --max-time 10 "$URL/selftest")"

echo "--- 200 concurrent requests, one lock, a non-atomic counter"
redis-cli -p "$REDIS_PORT" del or:counter >/dev/null
mkdir -p "$work/incr"
codes=$(curl -s --no-progress-meter -Z --parallel-immediate --parallel-max 200 --max-time 60 \
  -o "$work/incr/#1" -w '%{http_code}\n' "$URL/incr?n=[1-200]" | sort | uniq -c | xargs)
expect_eq "HTTP statuses of the 200 requests" "200 200" "$codes"
expect_eq "the counter after 200 GET, ngx.sleep, SET under the lock" "200" \
  "$(redis-cli -p "$REDIS_PORT" get or:counter)"
owners=$(cat "$work"/incr/* | sed -n 's/^ok owner=\([0-9]*\) .*/\1/p' | sort -u | wc -l)
expect_eq "distinct owner ids (one per request)" "200" "$owners"
stats=$(curl -s --max-time 5 "$URL/stats")
expect_match "never two requests inside the critical section" "max_inside=1 " "$stats"
max_acquiring=$(echo "$stats" | sed -n 's/.*max_acquiring=\([0-9]*\).*/\1/p')
if [ "${max_acquiring:-0}" -gt 1 ]; then
  pass "the requests contended: up to $max_acquiring were in acquire at once"
else
  fail "the requests contended" "more than 1 in acquire at once" "'$stats'"
fi
expect_eq "the lock is free afterwards" "0" "$(redis-cli -p "$REDIS_PORT" exists or:counter-lock)"

echo "--- the worker serves other requests while one waits"
# A Redisson-format hold by some other client, for 30 s.
redis-cli -p "$REDIS_PORT" hset or:held "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:held 30000 >/dev/null
curl -s --max-time 30 -o "$work/wait.body" -w '%{http_code}' \
  "$URL/wait?lock=or:held&wait_ms=20000" >"$work/wait.code" &
waiter=$!
ping=
for i in $(seq 100); do # until the waiter is in acquire, 10 s at most
  ping=$(curl -s --max-time 5 "$URL/ping?lock=or:held")
  [ "$ping" = "pong waiting=1 locked=true" ] && break
  sleep 0.1
done
expect_eq "/ping answers while /wait waits (the lock held elsewhere)" \
  "pong waiting=1 locked=true" "$ping"
served=0
for i in $(seq 50); do
  [ "$(curl -s --max-time 5 "$URL/ping?lock=or:held")" = "pong waiting=1 locked=true" ] &&
    served=$((served + 1))
done
expect_eq "50 more /ping answered, each while the waiter still waits" "50" "$served"
if kill -0 "$waiter" 2>/dev/null && [ ! -s "$work/wait.code" ]; then
  pass "the waiting request is still in flight"
else
  fail "the waiting request is still in flight" "curl running, no status yet" \
    "status '$(cat "$work/wait.code")'"
fi
redis-cli -p "$REDIS_PORT" del or:held >/dev/null # the other client lets go
for i in $(seq 100); do # 10 s
  kill -0 "$waiter" 2>/dev/null || break
  sleep 0.1
done
wait "$waiter"
expect_eq "the waiter's status once the lock is free" "200" "$(cat "$work/wait.code")"
expect_match "the waiter's answer" "^acquired after [0-9]+ ms$" "$(cat "$work/wait.body")"
echo "    (/wait answered: $(cat "$work/wait.body"); $served /ping answered meanwhile)"

redis-cli -p "$REDIS_PORT" hset or:held "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:held 30000 >/dev/null
body=$(curl -s --max-time 10 -w ' %{http_code}' "$URL/wait?lock=or:held&wait_ms=300")
expect_eq "a wait that runs out" "not acquired: busy (NOT_ACQUIRED) 503" "$(echo $body)"
redis-cli -p "$REDIS_PORT" del or:held >/dev/null

echo "--- the lock family"
expect_eq "/family/selftest (rwlock, fair_lock, semaphores, multi_lock)" "family selftest done" \
  "$(curl -s --max-time 20 "$URL/family/selftest")"
mkdir -p "$work/rw"
# 60 requests on one read-write lock: every 6th writes.
urls=()
for i in $(seq 60); do
  side=read
  ((i % 6 == 0)) && side=write
  urls+=(-o /dev/null "$URL/family/rw?side=$side&n=$i")
done
codes=$(curl -s --no-progress-meter -Z --parallel-immediate --parallel-max 60 --max-time 60 \
  -w '%{http_code}\n' "${urls[@]}" | sort | uniq -c | xargs)
expect_eq "HTTP statuses of the 60 read-write requests" "60 200" "$codes"
codes=$(curl -s --no-progress-meter -Z --parallel-immediate --parallel-max 30 --max-time 60 \
  -o /dev/null -w '%{http_code}\n' "$URL/family/sem?n=[1-30]" | sort | uniq -c | xargs)
expect_eq "HTTP statuses of the 30 semaphore requests" "30 200" "$codes"
fstats=$(curl -s --max-time 5 "$URL/family/stats")
expect_match "readers overlapped, no writer ever shared the lock" \
  "max_readers=([2-9]|[1-9][0-9]+) max_writers=1 violations=0 " "$fstats"
expect_match "never more than 3 of the semaphore's permits out, and all 3 used" \
  "max_permits=3$" "$fstats"
expect_eq "the read-write lock is free afterwards" "0" "$(redis-cli -p "$REDIS_PORT" exists or:rw)"
expect_eq "the semaphore's 3 permits are back" "3" "$(redis-cli -p "$REDIS_PORT" get or:sem)"

echo "--- nginx's error log"
stop_nginx
bad=$(grep -E '\[(error|crit|alert|emerg)\]' "$prefix/error.log")
expect_eq "no error, crit, alert or emerg lines" "" "$bad"
expect_match "the worker exited normally" "exit" "$(grep -E 'worker process [0-9]+ exited' "$prefix/error.log" | head -n 1)"
grep -E 'exited on signal' "$prefix/error.log" && fail "no worker crashed" "none" "a crash"

echo "$passed passed, $failed failed"
((failed == 0))
