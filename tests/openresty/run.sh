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
#   - the lock family (tests/openresty/family_app.lua), on the engine: while
#     a write acquire waits for a write lock held elsewhere, the worker
#     answers other requests, and the writer gets it once it is free; each
#     type's results in a request (and resty.redlockc.blocking's);
#     concurrent readers overlap and writers are alone; a semaphore of 3
#     never has more than 3 holders; the family calls open no connection
#     beside the engine client's (CLIENT LIST before and after).
#   - resty.redlockc on the engine (tests/openresty/engine_app.lua): results
#     in a request; a waiter woken by a release and by an unlock message; a
#     lock left held by a request, or by a client that aborts while holding
#     or while waiting, released at the request's end (finish_request in the
#     log phase); renewals keep a watchdog hold; client:metrics() counts the
#     engine's acquires, busy tries, waits (and their time) and renewals,
#     plus the blocking twin's; a waiter gets a lock whose holder expired
#     without a message; a hold deleted behind its back is lost; Redis
#     SIGSTOPped 2 s while unrelated requests are answered; Redlock over 3
#     nodes (one stopped: quorum of 2); two workers contending (a second
#     nginx with 2 workers: counter exact, both took the lock).
#   - "held means held" (tests/openresty/held_app.lua): a fixed lease that
#     runs out while another owner takes the lock is not owned, counts 0,
#     has no token, and its loss is logged; the first look after the worker
#     was blocked past a watchdog lease says not owned; validity() of a
#     healthy hold over many renewals stays above a third of the lease; a
#     grant that came while the worker was blocked past io_timeout_ms is a
#     grant.
#   - the fencing option (tests/openresty/fencing_app.lua, a redis-server of
#     its own): by default fencing_token() says E_INVAL naming the option and
#     released locks leave no key; with fencing = 1 a token per hold and one
#     counter key per name (resty.redlockc and resty.redlockc.blocking).
#   - the classic format (tests/openresty/classic_app.lua): with format =
#     "classic" a lock is a string key holding "<uuid>:<hex>", a nested
#     acquire is E_INVAL "not reentrant", release leaves no key; fencing = 1
#     beside it is refused (both modules).
#   The /incr, /wait and /ping checks above use resty.redlockc too; the
#   family too (module=blocking: 1.0's module, its selftest only).
# RLC_OPENRESTY_ONLY=held runs the "held means held" checks alone (with the
# error log's).
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
DUO_PID=
TLS_PID=
README_PID=
# stop_nginx PIDVAR: graceful (the workers finish, exit), SIGKILL after 10 s.
stop_nginx() {
  local var=${1:-NGINX_PID} pid i
  pid=${!var}
  [ -n "$pid" ] || return 0
  kill -QUIT "$pid" 2>/dev/null
  for i in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  printf -v "$var" %s ""
}
STOPPED_PIDS=() # redis servers under SIGSTOP: continued before the cleanup
cleanup() {
  local p
  for p in "${STOPPED_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; done
  stop_nginx NGINX_PID
  stop_nginx DUO_PID
  stop_nginx TLS_PID
  stop_nginx README_PID
  redis_stop_all
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM # so that the EXIT trap runs on these too

redis_start REDIS || { echo "FAIL - redis-server did not start"; exit 1; }
redis_start REDIS2 || { echo "FAIL - redis-server did not start"; exit 1; }
redis_start REDIS3 || { echo "FAIL - redis-server did not start"; exit 1; }
redis_start FENCE || { echo "FAIL - redis-server did not start"; exit 1; }
if [ "${RLC_OPENRESTY_ONLY:-}" = held ]; then # neither is used there
  SEN_URI= SEN_M_PORT= SEN_R_PORT= CL_URI=
else
  sentinel_group_start SEN rlcor || { echo "FAIL - the sentinel group did not start"; exit 1; }
  cluster_start CL || { echo "FAIL - the cluster did not start"; exit 1; }
fi

# As root, nginx would switch its worker to "nobody", who may not read the
# work tree: keep the worker as whoever runs the test.
user=
[ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"

# start_nginx PREFIX PORT WORKERS PIDVAR [TEMPLATE]: nginx in the foreground,
# its pid in PIDVAR; waits (10 s at most) until it answers /ping.
start_nginx() {
  local pfx=$1 port=$2 workers=$3 var=$4 template=${5:-$HERE/nginx.conf.in} i
  mkdir -p "$pfx/tmp"
  sed -e "s|@PREFIX@|$pfx|g" -e "s|@PORT@|$port|g" -e "s|@SRC@|$TOP|g" \
    -e "s|@LIB@|$LIB|g" -e "s|@REDIS_PORT@|$REDIS_PORT|g" -e "s|@USER@|$user|g" \
    -e "s|@REDIS_PORT2@|$REDIS2_PORT|g" -e "s|@REDIS_PORT3@|$REDIS3_PORT|g" \
    -e "s|@WORKERS@|$workers|g" -e "s|@CERTS@|$work/certs|g" \
    -e "s|@SENTINEL_URI@|$SEN_URI|g" -e "s|@SENTINEL_DATA@|$SEN_M_PORT,$SEN_R_PORT|g" \
    -e "s|@CLUSTER_URI@|$CL_URI|g" \
    "$template" >"$pfx/nginx.conf"
  echo "--- nginx ($workers worker(s)) on 127.0.0.1:$port, prefix $pfx"
  nginx -p "$pfx" -c "$pfx/nginx.conf" -e "$pfx/error.log" &
  printf -v "$var" %s "$!"
  for i in $(seq 100); do # 10 s
    kill -0 "${!var}" 2>/dev/null || break
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/ping")" = 200 ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "FAIL - nginx did not answer /ping; its error log:"
  cat "$pfx/error.log"
  return 1
}

# "Held means held": what a lock object says is its hold's validity at the
# moment of the call (tests/openresty/held_app.lua).
held_checks() {
  echo "--- held means held (the validity at the moment of the call)"
  local fixed
  fixed=$(curl -s --max-time 20 "$URL/h/fixed?lock=or:h:fixed")
  expect_eq "a fixed lease (600 ms) that ran out while another owner took the lock: not owned" \
    "before=true other took it=true owned=false hold_count=0 token=nil E_LOST validity=0" \
    "$(sed -n 1p <<<"$fixed")"
  expect_eq "its loss is logged at its end without anyone asking; its release says E_LOST" \
    "loss logged=true release=E_LOST" "$(sed -n 2p <<<"$fixed")"
  expect_eq "the first look after the worker was blocked past a 600 ms watchdog lease" \
    "before=true other took it=true owned=false hold_count=0 token=nil E_LOST validity=0" \
    "$(curl -s --max-time 20 "$URL/h/blocked?lock=or:h:blocked")"
  local sampled
  sampled=$(curl -s --max-time 20 "$URL/h/validity?lock=or:h:validity")
  expect_match "validity() of a healthy 1.2 s watchdog hold, sampled over 3.2 s of renewals" \
    "^above a third of the lease=true renewals>=5=true " "$sampled"
  echo "    ${sampled#* renewals>=5=* }"
  expect_eq "a grant that came while the worker was blocked 3 x io_timeout_ms is a grant" \
    "pause=+OK acquire=true" "$(curl -s --max-time 20 "$URL/h/grant?lock=or:h:grant")"
}

# The fencing option, on the FENCE server (nothing else uses it): what each
# module's fencing_token() says, and the keys left after the releases.
fencing_checks() {
  echo "--- the fencing option (a redis-server of its own)"
  local module q
  for module in engine blocking; do
    q="$URL/fencing?port=$FENCE_PORT&module=$module"
    redis-cli -p "$FENCE_PORT" flushall >/dev/null
    expect_eq "$module, default options: fencing_token() says E_INVAL, naming the option" \
      "orders: E_INVAL option named=true, accounts: E_INVAL option named=true, jobs:7: E_INVAL option named=true" \
      "$(curl -s --max-time 20 "$q")"
    expect_eq "$module, default options: no key left after the releases" "" \
      "$(redis-cli -p "$FENCE_PORT" keys '*' | xargs)"
    expect_eq "$module, fencing = 1: a token per hold" \
      "orders: token, accounts: token, jobs:7: token" "$(curl -s --max-time 20 "$q&fencing=1")"
    expect_eq "$module, fencing = 1: one counter key per name stays" \
      "redisson_lock_token:{accounts} redisson_lock_token:{jobs:7} redisson_lock_token:{orders}" \
      "$(redis-cli -p "$FENCE_PORT" keys '*' | LC_ALL=C sort | xargs)"
  done
}

# The classic format (format = "classic"), on the FENCE server: the key
# a lock leaves while held, a nested acquire, the release.
classic_checks() {
  echo "--- the classic format"
  local module
  for module in engine blocking; do
    expect_eq "$module, format = classic: a string key of <uuid>:<hex>, not reentrant, none left" \
      "type=string value=<uuid>:<hex> nested=E_INVAL not reentrant=true value kept=true count=1 release=true exists=0" \
      "$(curl -s --max-time 20 "$URL/classic?port=$FENCE_PORT&module=$module&name=or:classic:$module")"
    expect_eq "$module, fencing = 1 beside format = classic is refused" "E_INVAL format named=true" \
      "$(curl -s --max-time 20 "$URL/classic_fencing?port=$FENCE_PORT&module=$module")"
  done
}

# The main nginx's log once it has stopped: no errors, no crash.
log_checks() {
  echo "--- nginx's error log"
  stop_nginx NGINX_PID
  bad=$(grep -E '\[(error|crit|alert|emerg)\]' "$prefix/error.log")
  expect_eq "no error, crit, alert or emerg lines" "" "$bad"
  expect_match "the worker exited normally" "exit" "$(grep -E 'worker process [0-9]+ exited' "$prefix/error.log" | head -n 1)"
  grep -E 'exited on signal' "$prefix/error.log" && fail "no worker crashed" "none" "a crash"
}

PORT=$(free_port) || { echo "FAIL - no free port"; exit 1; }
URL=http://127.0.0.1:$PORT
start_nginx "$prefix" "$PORT" 1 NGINX_PID || exit 1

if [ "${RLC_OPENRESTY_ONLY:-}" = held ]; then
  held_checks
  log_checks
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit
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
# The other client lets go as Redisson does: DEL, then the unlock message,
# which wakes the waiter (its wait is the engine's, on the subscription).
redis-cli -p "$REDIS_PORT" del or:held >/dev/null
redis-cli -p "$REDIS_PORT" publish "redisson_lock__channel:{or:held}" 0 >/dev/null
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

echo "--- the lock family (resty.redlockc: on the engine, over cosockets)"
# The connections Redis has, but the one asking (redis-cli's own).
redis_clients() { redis-cli -p "$REDIS_PORT" client list | grep -vc 'cmd=client'; }
# family_app's engine client, its command and subscriber connections open.
redis-cli -p "$REDIS_PORT" hset or:fwarm "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:fwarm 30000 >/dev/null
expect_eq "a plain lock's wait of 50 ms on family_app's client" "nil busy" \
  "$(curl -s --max-time 10 "$URL/family/warm?name=or:fwarm")"
redis-cli -p "$REDIS_PORT" del or:fwarm >/dev/null
clients_before=$(redis_clients)
# A write lock held by some other client (Redisson's layout), for 30 s.
redis-cli -p "$REDIS_PORT" hset or:fw mode write "external-holder:1:write" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:fw 30000 >/dev/null
curl -s --max-time 30 -o "$work/fwait.body" -w '%{http_code}' \
  "$URL/family/wait?name=or:fw&wait_ms=20000" >"$work/fwait.code" &
fwaiter=$!
ping=
for i in $(seq 100); do # until the waiter is in acquire, 10 s at most
  ping=$(curl -s --max-time 5 "$URL/family/ping")
  [ "$ping" = "pong waiting=1" ] && break
  sleep 0.1
done
expect_eq "/family/ping answers while a write acquire waits (the write lock held elsewhere)" \
  "pong waiting=1" "$ping"
served=0
for i in $(seq 20); do
  [ "$(curl -s --max-time 5 "$URL/family/ping")" = "pong waiting=1" ] && served=$((served + 1))
done
expect_eq "20 more /family/ping answered, each while the writer still waits" "20" "$served"
# The other client lets go: DEL, then the read-write lock's unlock message.
redis-cli -p "$REDIS_PORT" del or:fw >/dev/null
redis-cli -p "$REDIS_PORT" publish "redisson_rwlock:{or:fw}" 0 >/dev/null
for i in $(seq 100); do # 10 s
  kill -0 "$fwaiter" 2>/dev/null || break
  sleep 0.1
done
wait "$fwaiter"
expect_eq "the writer's status once the lock is free" "200" "$(cat "$work/fwait.code")"
expect_match "the writer's answer" "^acquired after [0-9]+ ms$" "$(cat "$work/fwait.body")"
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
expect_eq "the family calls opened no connection of their own (no blocking client)" \
  "$clients_before" "$(redis_clients)"
expect_eq "resty.redlockc.blocking: /family/selftest" "family selftest done" \
  "$(curl -s --max-time 20 "$URL/family/selftest?module=blocking")"

echo "--- the non-blocking driver (resty.redlockc on the engine)"
expect_eq "/e/selftest (acquire, reentry, extend, release, a waiter woken by a release)" \
  "engine selftest done" "$(curl -s --max-time 30 "$URL/e/selftest")"

# await_eq WHAT EXPECTED CMD...: runs CMD every 0.1 s until it prints
# EXPECTED (5 s at most), then checks.
await_eq() {
  local what=$1 expected=$2 seen i
  shift 2
  for i in $(seq 50); do
    seen=$("$@")
    [ "$seen" = "$expected" ] && break
    sleep 0.1
  done
  expect_eq "$what" "$expected" "$seen"
}
rexists() { redis-cli -p "$REDIS_PORT" exists "$1"; }

body=$(curl -s --max-time 10 "$URL/e/hold?lock=or:e:end&ms=0")
expect_eq "a request that acquires and returns without releasing" \
  "held returning without release" "$(echo $body)"
await_eq "its lock is released at the request's end (log phase; the watchdog lease is 30 s)" \
  0 rexists or:e:end

# A client that leaves while the request holds the lock (20 s sleep).
curl -s --max-time 1 -o "$work/abort.body" "$URL/e/hold?lock=or:e:abort&ms=20000"
expect_eq "the aborted request had taken the lock" "held" "$(head -n 1 "$work/abort.body")"
await_eq "the aborting client's lock is released at once (not after the request's 20 s)" \
  0 rexists or:e:abort

# A client that leaves while its request waits for a lock held elsewhere.
redis-cli -p "$REDIS_PORT" hset or:e:abw "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:e:abw 30000 >/dev/null
curl -s --max-time 1 -o /dev/null "$URL/e/hold?lock=or:e:abw&wait_ms=20000&ms=0"
engine_ops() { curl -s --max-time 5 "$URL/e/stats" | sed 's/ .*//'; }
await_eq "its acquire is ended (the engine has no op in flight)" "ops=0" engine_ops
redis-cli -p "$REDIS_PORT" del or:e:abw >/dev/null
redis-cli -p "$REDIS_PORT" publish "redisson_lock__channel:{or:e:abw}" 0 >/dev/null
expect_match "the lock is free for the next request" "^ok pid=" \
  "$(curl -s --max-time 10 "$URL/e/cycle?lock=or:e:abw")"
expect_eq "and nobody holds it" 0 "$(rexists or:e:abw)"

expect_eq "a watchdog hold (lease 1.5 s) kept 4 s by the pump's renewals" \
  "held 4 s: pttl>0=true owned=true release=true" "$(curl -s --max-time 20 "$URL/e/renew")"

# client:metrics() on the engine client: what its engine counted plus its
# blocking twin's counters (it used to give the twin's alone: engine locks 0).
redis-cli -p "$REDIS_PORT" del or:e:metrics >/dev/null
metrics=$(curl -s --max-time 20 "$URL/e/metrics?lock=or:e:metrics")
expect_match "metrics: 2 engine acquires + 1 twin acquire, 1 busy try, 1 wait (in a bucket)" \
  "^acquires=3 busy=1 waits=1 wait_ms_sum=[0-9]+ bucketed=1 renewals=[0-9]+->[0-9]+$" "$metrics"
wait_sum=$(sed -n 's/.* wait_ms_sum=\([0-9]*\) .*/\1/p' <<<"$metrics")
if [ "${wait_sum:-0}" -ge 150 ]; then
  pass "metrics: the wait for a holder that let go 150 ms later counts >= 150 ms ($wait_sum)"
else
  fail "metrics: the wait for a holder that let go 150 ms later counts >= 150 ms" \
    "wait_ms_sum >= 150" "'$metrics'"
fi
renewals=$(sed -n 's/.* renewals=\([0-9]*\)->\([0-9]*\)$/\1 \2/p' <<<"$metrics")
read -r r_before r_after <<<"${renewals:-0 0}"
if [ $((r_after - r_before)) -ge 2 ]; then
  pass "metrics: renewals grow over 1 s of a watchdog hold renewed every 200 ms ($r_before->$r_after)"
else
  fail "metrics: renewals grow over 1 s of a watchdog hold renewed every 200 ms" \
    "at least 2 more" "'$metrics'"
fi

# A holder that dies: its key expires and no unlock message is ever sent.
# The waiter must not depend on the message (the engine's timer on the
# lease end the busy reply reported).
redis-cli -p "$REDIS_PORT" hset or:e:nomsg "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:e:nomsg 1500 >/dev/null
expect_match "a waiter gets a lock whose holder expired without an unlock message" \
  "^ok pid=" "$(curl -s --max-time 20 "$URL/e/cycle?lock=or:e:nomsg&wait_ms=10000")"

expect_eq "a hold deleted behind its back is lost (watchdog 1.5 s); its release says so" \
  "owned before=true lost seen=true validity=0 release=E_LOST (lost)" \
  "$(curl -s --max-time 20 "$URL/e/lost" | sed 's/ (.*)$/ (lost)/')"

expect_eq "with the default 30 s lease a deleted key is pushed as lost within 2 s (loss_push)" \
  "pushed=true release=E_LOST" "$(curl -s --max-time 20 "$URL/e/pushed")"
expect_eq "a node that refuses loss push is said once in the error log (ACL without +client)" \
  "logged=1 later=1 release=true" "$(curl -s --max-time 20 "$URL/e/refused")"

held_checks
fencing_checks
classic_checks

echo "--- connections killed by the server"
redis-cli -p "$REDIS_PORT" hset or:e:kill "external-holder:1" 1 >/dev/null
redis-cli -p "$REDIS_PORT" pexpire or:e:kill 30000 >/dev/null
curl -s --max-time 30 -o "$work/kill.body" "$URL/e/cycle?lock=or:e:kill&wait_ms=20000" &
killw=$!
subscribed() { redis-cli -p "$REDIS_PORT" pubsub numsub "redisson_lock__channel:{or:e:kill}" | tail -n 1; }
await_eq "the waiter is subscribed" 1 subscribed
redis-cli -p "$REDIS_PORT" client kill type pubsub >/dev/null
redis-cli -p "$REDIS_PORT" client kill type normal >/dev/null # redis-cli's own too: harmless
await_eq "it subscribes again on a new connection" 1 subscribed
redis-cli -p "$REDIS_PORT" del or:e:kill >/dev/null
redis-cli -p "$REDIS_PORT" publish "redisson_lock__channel:{or:e:kill}" 0 >/dev/null
wait "$killw"
expect_match "the waiter gets the lock after its connections were killed" "^ok pid=" \
  "$(cat "$work/kill.body")"

echo "--- Redis stopped (SIGSTOP) for 2 s: the worker answers unrelated requests"
mkdir -p "$work/stall"
kill -STOP "$REDIS_PID"
STOPPED_PIDS+=("$REDIS_PID")
stuck=()
for i in 1 2 3 4 5; do # lock requests stuck on the stopped Redis
  curl -s --max-time 30 -o "$work/stall/$i" -w '%{http_code}' \
    "$URL/e/cycle?lock=or:e:stall$i&wait_ms=5000" >"$work/stall/$i.code" &
  stuck+=($!)
done
served=0
for i in $(seq 20); do # about 2 s
  [ "$(curl -s --max-time 1 "$URL/e/ping")" = pong ] && served=$((served + 1))
  sleep 0.1
done
kill -CONT "$REDIS_PID"
STOPPED_PIDS=()
expect_eq "20 /e/ping answered (within 1 s each) while Redis was stopped" 20 "$served"
wait "${stuck[@]}"
answered=0
for i in 1 2 3 4 5; do
  [[ "$(cat "$work/stall/$i.code")" =~ ^(200|503)$ ]] && answered=$((answered + 1))
done
expect_eq "the 5 lock requests caught in the stall all got an answer" 5 "$answered"
expect_match "a lock cycle after Redis is back" "^ok pid=" \
  "$(curl -s --max-time 10 "$URL/e/cycle?lock=or:e:after")"

echo "--- Redlock over 3 nodes"
expect_eq "acquire + release over 3 nodes (the key on all 3)" \
  "acquired nodes_with_key=3 release=true" \
  "$(curl -s --max-time 10 "$URL/e/redlock?lock=or:e:red1" | sed 's/ token=[0-9]*//')"
kill -STOP "$REDIS3_PID"
STOPPED_PIDS+=("$REDIS3_PID")
expect_eq "with one node stopped: a quorum of 2" "acquired nodes_with_key=2 release=true" \
  "$(curl -s --max-time 20 "$URL/e/redlock?lock=or:e:red2" | sed 's/ token=[0-9]*//')"
kill -CONT "$REDIS3_PID"
STOPPED_PIDS=()

echo "--- Sentinel (redis-sentinel://)"
sm=$(sentinel_master_port "$SEN_SPORT" rlcor)
expect_eq "a lock through redis-sentinel:// is written on the master" \
  "acquired on=$sm release=true" "$(curl -s --max-time 20 "$URL/e/sentinel?lock=or:e:sen1")"
redis-cli -p "$SEN_SPORT" SENTINEL FAILOVER rlcor >/dev/null
for i in $(seq 400); do # the new master named and promoted (20 s)
  nm=$(sentinel_master_port "$SEN_SPORT" rlcor)
  # promoted, and the old master demoted (until then it answers as a master too)
  [ -n "$nm" ] && [ "$nm" != "$sm" ] &&
    grep -q "role:master" <<<"$(redis-cli -p "$nm" INFO replication)" &&
    grep -q "role:slave" <<<"$(redis-cli -p "$sm" INFO replication)" && break
  sleep 0.05
done
seen=
for i in $(seq 40); do # the driver follows it (each try is bounded by its wait)
  seen=$(curl -s --max-time 20 "$URL/e/sentinel?lock=or:e:sen2")
  [ "$seen" = "acquired on=$nm release=true" ] && break
  sleep 0.1
done
expect_eq "after SENTINEL FAILOVER the lock is written on the new master" \
  "acquired on=$nm release=true" "$seen"

echo "--- Cluster (redis-cluster://)"
expect_eq "locks on 30 names through redis-cluster://, each on its slot's master only" \
  "30 ok, masters used 3" "$(curl -s --max-time 60 "$URL/e/cluster?n=30")"

echo "--- two workers contending for one lock"
DUO_PORT=$(free_port) || { echo "FAIL - no free port"; exit 1; }
if start_nginx "$work/duo" "$DUO_PORT" 2 DUO_PID; then
  redis-cli -p "$REDIS_PORT" del or:duo >/dev/null
  mkdir -p "$work/duo-incr"
  codes=$(curl -s --no-progress-meter -Z --parallel-immediate --parallel-max 100 --max-time 60 \
    -o "$work/duo-incr/#1" -w '%{http_code}\n' \
    "http://127.0.0.1:$DUO_PORT/incr?key=or:duo&lock=or:duo-lock&n=[1-200]" | sort | uniq -c | xargs)
  expect_eq "HTTP statuses of 200 requests over 2 workers" "200 200" "$codes"
  expect_eq "the counter after 200 GET, ngx.sleep, SET under the lock, 2 workers" "200" \
    "$(redis-cli -p "$REDIS_PORT" get or:duo)"
  pids=$(cat "$work"/duo-incr/* | sed -n 's/^ok owner=\([0-9]*\) .*/\1/p' |
    while read -r o; do echo $((o >> 32)); done | sort -u | wc -l)
  expect_eq "both workers took the lock" 2 "$pids"
  stop_nginx DUO_PID
  expect_eq "no error lines in the 2-worker nginx's log" "" \
    "$(grep -E '\[(error|crit|alert|emerg)\]' "$work/duo/error.log")"
else
  fail "the 2-worker nginx started" "it answering /ping" "no answer"
fi

echo "--- rediss:// (a TLS nginx: lua_ssl_trusted_certificate is the tests' CA)"
# Certificates for this run (OpenSSL); redis-servers on TLS ports only: one
# with a password, one that requires a client certificate, one whose
# certificate another CA signed.
if bash "$TOP/tests/tls/make_certs.sh" "$work/certs" &&
  redis_start_tls TLSA "$work/certs" server no --requirepass tls-pw &&
  redis_start_tls TLSM "$work/certs" server yes &&
  redis_start_tls TLSR "$work/certs" other-server no; then
  started=
  for attempt in 1 2 3; do # a port taken between free_port and bind: another one
    TLS_PORT=$(free_port) || break
    if start_nginx "$work/tls" "$TLS_PORT" 1 TLS_PID "$HERE/nginx_tls.conf.in"; then
      started=1
      break
    fi
    stop_nginx TLS_PID
  done
  if [ -n "$started" ]; then
    # tls_try WHAT EXPECTED-REGEX NODES [OPTIONS]
    tls_try() {
      expect_match "$1" "$2" "$(curl -s --max-time 20 -G "http://127.0.0.1:$TLS_PORT/tls/try" \
        --data-urlencode "nodes=$3" --data-urlencode "options=${4:-}" \
        --data-urlencode "lock=or:tls:$RANDOM")"
    }
    A=rediss://:tls-pw@127.0.0.1:$TLSA_PORT
    tls_try "acquire, busy for another owner, release over rediss:// (verified, AUTH inside)" \
      "^ok token=[0-9]+ second=busy$" "$A" "tls_server_name=localhost"
    tls_try "an IP address is no name to check: tls_server_name is asked for" \
      "^client failed: node 127\.0\.0\.1:$TLSA_PORT is rediss:// at an IP address: .*set tls_server_name.*\(E_INVAL\)$" "$A"
    tls_try "a name the certificate does not carry fails verification, saying so" \
      "^acquire failed: .*127\.0\.0\.1:$TLSA_PORT: TLS handshake failed: certificate host mismatch\) \(E_CONNECT\)$" \
      "$A" "tls_server_name=wrong.example"
    tls_try "a certificate from another CA fails the handshake, saying so" \
      "^acquire failed: .*TLS handshake failed: .*unable to verify .*lua_ssl_trusted_certificate.*\(E_CONNECT\)$" \
      "rediss://127.0.0.1:$TLSR_PORT" "tls_server_name=localhost"
    # lua-nginx-module 0.10.23 calls a handshake that completed within the
    # call and then failed verification a success (its socket closed): in
    # about 2 tries in 5 before the driver read the reason where it is kept
    why=0
    for i in $(seq 10); do
      for case in "rediss://127.0.0.1:$TLSR_PORT|tls_server_name=localhost|unable to verify" \
        "$A|tls_server_name=wrong.example|certificate host mismatch"; do
        out=$(curl -s --max-time 20 -G "http://127.0.0.1:$TLS_PORT/tls/try" \
          --data-urlencode "nodes=${case%%|*}" --data-urlencode "options=$(cut -d'|' -f2 <<<"$case")" \
          --data-urlencode "lock=or:tls:again:$i")
        [[ $out == *"TLS handshake failed: "*"${case##*|}"* ]] && why=$((why + 1)) || echo "# saw: $out"
      done
    done
    expect_eq "twenty refused handshakes in a row each say why" 20 "$why"
    tls_try "tls_verify=0 connects to it anyway" "^ok token=[0-9]+ second=busy$" \
      "rediss://127.0.0.1:$TLSR_PORT" "tls_verify=0"
    tls_try "a required client certificate, given (tls_cert_file, tls_key_file)" \
      "^ok token=[0-9]+ second=busy$" "rediss://127.0.0.1:$TLSM_PORT" \
      "tls_server_name=localhost;tls_cert_file=$work/certs/client.crt;tls_key_file=$work/certs/client.key"
    tls_try "a required client certificate, key in the same file" "^ok token=[0-9]+ second=busy$" \
      "rediss://127.0.0.1:$TLSM_PORT" "tls_server_name=localhost;tls_cert_file=$work/certs/client.pem"
    tls_try "a required client certificate, missing: a clear error" \
      "^acquire failed: .*TLS .*failed: .*\(E_(CONNECT|TIMEOUT)\)$" \
      "rediss://127.0.0.1:$TLSM_PORT" "tls_server_name=localhost"
    tls_try "tls_ca_file is refused under nginx (its CAs are lua_ssl_trusted_certificate)" \
      "^client failed: option tls_ca_file: under nginx the CAs come from the lua_ssl_trusted_certificate directive.*\(E_INVAL\)$" \
      "$A" "tls_ca_file=$work/certs/ca.crt"
    tls_try "an unreadable client certificate is refused when the client is made" \
      "^client failed: option tls_cert_file: cannot read .*\(E_INVAL\)$" \
      "$A" "tls_cert_file=$work/certs/missing.crt"
    out=$(curl -s --max-time 20 -G "http://127.0.0.1:$TLS_PORT/tls/try" \
      --data-urlencode "nodes=rediss://:tls-pw@127.0.0.1:$TLSA_PORT" \
      --data-urlencode "options=tls_server_name=wrong.example" --data-urlencode "lock=or:tls:pw")
    [[ $out == *tls-pw* ]] && fail "a TLS failure hides the password" "no 'tls-pw'" "'$out'" ||
      pass "a TLS failure hides the password"
    stop_nginx TLS_PID
    expect_eq "no crit, alert or emerg lines in the TLS nginx's log (handshake errors are expected)" "" \
      "$(grep -E '\[(crit|alert|emerg)\]' "$work/tls/error.log")"
  else
    fail "the TLS nginx started" "it answering /ping" "no answer"
  fi
else
  fail "TLS certificates and redis-servers with --tls-port" "started" "not started"
fi

echo "--- bindings/luajit/README.md's nginx example, as written, in a fresh nginx"
source "$HERE/readme_snippet.sh" && readme_snippet || fail "the README's nginx example ran" "its checks" "a failure"

log_checks

echo "$passed passed, $failed failed"
((failed == 0))
