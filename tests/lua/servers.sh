# servers.sh - real redis-server processes on free loopback ports, for the
# Lua and OpenResty suites (sourced by their run.sh). Nothing on disk; each
# server is stopped by its pid; every wait is bounded.
#   free_port              prints a loopback port that refuses connections now
#   redis_start NAME       starts one; sets NAME_PID, NAME_PORT, NAME_URI
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
  local i p
  for i in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

redis_start() {
  local name=$1 attempt i port pid dir
  dir=$(mktemp -d /tmp/rlc-lua-redis-XXXXXX) || return 1
  printf -v "${name}_DIR" %s "$dir"
  RLC_REDIS_NAMES+=("$name")
  for attempt in 1 2 3 4 5; do
    port=$(free_port) || continue
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --daemonize no --dir "$dir" --logfile "$dir/redis.log" >/dev/null 2>&1 &
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
