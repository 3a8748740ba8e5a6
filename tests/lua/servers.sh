# servers.sh - real redis-server processes on free loopback ports, for the
# Lua and OpenResty suites (sourced by their run.sh). Nothing on disk; each
# server is stopped by its pid; every wait is bounded.
#   free_port              prints a loopback port that refuses connections now
#   redis_start NAME [ARGS...]
#                          starts one (ARGS go to redis-server); sets
#                          NAME_PID, NAME_PORT, NAME_URI
#   redis_start_tls NAME CERTS CERT AUTH [ARGS...]
#                          one that speaks TLS only (--port 0 --tls-port):
#                          CERTS a tests/tls/make_certs.sh directory, CERT its
#                          CERT.crt/.key (server, other-server), AUTH yes|no
#                          (--tls-auth-clients); NAME_URI is rediss://
#   redis_stop NAME        stops it: SIGTERM, SIGKILL after 5 s
#   redis_stop_all         stops every server started here (for the EXIT trap)
# The caller's EXIT trap must call redis_stop_all.

RLC_REDIS_NAMES=()

# A port in 20000..59999 that nobody listens on now. A server may still lose
# it before it binds: redis_start then tries another.
free_port() {
  # Below the kernel's ephemeral range: a port picked inside it can become the
  # local end of any outgoing connection between this check and the bind (CI
  # saw a cluster bus port taken that way).
  local i p lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null) || lo=32768
  [ "${lo:-0}" -gt 11000 ] 2>/dev/null || lo=32768
  for i in $(seq 100); do
    p=$((10000 + RANDOM % (lo - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

redis_start() {
  local name=$1 attempt i port pid dir
  shift
  dir=$(mktemp -d /tmp/rlc-lua-redis-XXXXXX) || return 1
  printf -v "${name}_DIR" %s "$dir"
  RLC_REDIS_NAMES+=("$name")
  for attempt in 1 2 3 4 5; do
    port=$(free_port) || continue
    # FREE_PORT in the arguments (a cluster bus port) is a new free port each
    # attempt: the one that made this attempt fail may be the taken one
    local args=() a
    rm -f "$dir/nodes.conf" # a failed attempt's cluster identity, with its ports
    for a in "$@"; do
      if [ "$a" = FREE_PORT ]; then
        a=$(free_port) || continue 2
        [ "$a" = "$port" ] && continue 2
      fi
      args+=("$a")
    done
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --daemonize no --dir "$dir" --logfile "$dir/redis.log" "${args[@]}" >/dev/null 2>&1 &
    pid=$!
    printf -v "${name}_PID" %s "$pid"
    for i in $(seq 200); do # PONG within 10 s
      kill -0 "$pid" 2>/dev/null || break # lost the port race: next port
      if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
        printf -v "${name}_PORT" %s "$port"
        printf -v "${name}_URI" %s "redis://127.0.0.1:$port"
        return 0
      fi
      sleep 0.05
    done
    redis_kill_pid "$pid"
  done
  echo "redis-server did not start; its log:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

redis_start_tls() {
  local name=$1 certs=$2 cert=$3 auth=$4 attempt i port pid dir
  shift 4
  dir=$(mktemp -d /tmp/rlc-lua-redis-XXXXXX) || return 1
  printf -v "${name}_DIR" %s "$dir"
  RLC_REDIS_NAMES+=("$name")
  # redis-cli's own TLS: the CA that signed CERT, a client certificate.
  local ca=$certs/ca.crt
  [ "$cert" = other-server ] && ca=$certs/other-ca.crt
  for attempt in 1 2 3 4 5; do
    port=$(free_port) || continue
    redis-server --port 0 --tls-port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --tls-cert-file "$certs/$cert.crt" --tls-key-file "$certs/$cert.key" \
      --tls-ca-cert-file "$certs/ca.crt" --tls-auth-clients "$auth" "$@" \
      --daemonize no --dir "$dir" --logfile "$dir/redis.log" >/dev/null 2>&1 &
    pid=$!
    printf -v "${name}_PID" %s "$pid"
    for i in $(seq 200); do # an answer within 10 s (PONG, or NOAUTH with a password)
      kill -0 "$pid" 2>/dev/null || break
      if [ -n "$(redis-cli --tls --cacert "$ca" --cert "$certs/client.crt" --key "$certs/client.key" \
                 -h 127.0.0.1 -p "$port" ping 2>/dev/null)" ]; then
        printf -v "${name}_PORT" %s "$port"
        printf -v "${name}_URI" %s "rediss://127.0.0.1:$port"
        return 0
      fi
      sleep 0.05
    done
    redis_kill_pid "$pid"
  done
  echo "redis-server (TLS) did not start; its log:" >&2
  cat "$dir/redis.log" >&2
  return 1
}

redis_kill_pid() {
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 100); do # 5 s, then SIGKILL
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

redis_stop() {
  local name=$1 pidvar="${1}_PID" dirvar="${1}_DIR"
  [ -n "${!pidvar:-}" ] && redis_kill_pid "${!pidvar}"
  printf -v "$pidvar" %s ""
  [ -n "${!dirvar:-}" ] && rm -rf "${!dirvar}"
  printf -v "$dirvar" %s ""
}

redis_stop_all() {
  local name
  for name in "${RLC_REDIS_NAMES[@]}"; do redis_stop "$name"; done
  RLC_REDIS_NAMES=()
}

# sentinel_group_start NAME MASTERNAME: a master (NAME_M), its replica
# (NAME_R) in sync, and three sentinels (NAME_S1..3) watching it with short
# timeouts (a failover takes about a second). Sets NAME_URI
# (redis-sentinel://...), NAME_SPORT (the first sentinel's port); every
# process is stopped by redis_stop_all.
sentinel_group_start() {
  local name=$1 master=$2 m r i j port pid dir seeds=
  redis_start "${name}_M" || return 1
  redis_start "${name}_R" || return 1
  m=${name}_M_PORT r=${name}_R_PORT
  # Redis 7 waits 5 s before a diskless full sync: the replica would hold nothing.
  redis-cli -p "${!m}" CONFIG SET repl-diskless-sync-delay 0 >/dev/null
  redis-cli -p "${!r}" REPLICAOF 127.0.0.1 "${!m}" >/dev/null
  for i in $(seq 300); do # in sync within 15 s
    grep -q "master_link_status:up" <<<"$(redis-cli -p "${!r}" INFO replication)" && break
    sleep 0.05
  done
  for j in 1 2 3; do
    dir=$(mktemp -d /tmp/rlc-lua-sentinel-XXXXXX) || return 1
    printf -v "${name}_S${j}_DIR" %s "$dir"
    RLC_REDIS_NAMES+=("${name}_S${j}")
    port=$(free_port) || return 1
    printf '%s\n' "port $port" "bind 127.0.0.1" "protected-mode no" "dir $dir" \
      "sentinel monitor $master 127.0.0.1 ${!m} 2" \
      "sentinel down-after-milliseconds $master 600" \
      "sentinel failover-timeout $master 3000" >"$dir/sentinel.conf"
    redis-server "$dir/sentinel.conf" --sentinel --logfile "$dir/sentinel.log" >/dev/null 2>&1 &
    pid=$!
    printf -v "${name}_S${j}_PID" %s "$pid"
    for i in $(seq 200); do
      [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
      sleep 0.05
    done
    seeds+="${seeds:+,}127.0.0.1:$port"
    [ "$j" = 1 ] && printf -v "${name}_SPORT" %s "$port"
  done
  local sp=${name}_SPORT
  for i in $(seq 400); do # the sentinels see the replica and each other (20 s)
    local info
    info=$(redis-cli -p "${!sp}" SENTINEL master "$master" 2>/dev/null | tr '\n' ' ')
    [[ $info =~ num-slaves\ 1\ .*num-other-sentinels\ 2 ]] && break
    sleep 0.05
  done
  printf -v "${name}_URI" %s "redis-sentinel://$seeds/$master"
}

# sentinel_master_port SENTINELPORT MASTERNAME: the master's port it names.
sentinel_master_port() {
  redis-cli -p "$1" SENTINEL get-master-addr-by-name "$2" 2>/dev/null | sed -n 2p
}

# cluster_start NAME: 3 masters and 3 replicas (NAME_1..NAME_6), joined by
# redis-cli --cluster create and awaited until all say cluster_state:ok.
# Sets NAME_URI (redis-cluster://<the six>), stopped by redis_stop_all.
cluster_start() {
  local name=$1 j i p ports=() seeds=
  for j in 1 2 3 4 5 6; do
    # the bus port given, not port + 10000 (taken, or past 65535)
    redis_start "${name}_$j" --cluster-enabled yes --cluster-node-timeout 1000 \
      --cluster-port FREE_PORT || return 1
    p=${name}_${j}_PORT
    ports+=("127.0.0.1:${!p}")
    seeds+="${seeds:+,}127.0.0.1:${!p}"
  done
  redis-cli --cluster create "${ports[@]}" --cluster-replicas 1 --cluster-yes >/dev/null 2>&1 ||
    return 1
  for i in $(seq 600); do # 30 s
    local ok=1
    for j in 1 2 3 4 5 6; do
      p=${name}_${j}_PORT
      grep -q "cluster_state:ok" <<<"$(redis-cli -p "${!p}" CLUSTER INFO 2>/dev/null)" || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.05
  done
  printf -v "${name}_URI" %s "redis-cluster://$seeds"
}
