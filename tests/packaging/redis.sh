# redis.sh - a real redis-server on a free loopback port, for the shell tests
# (sourced). Nothing on disk; stopped by pid; every wait bounded.
#   redis_start        sets REDIS_PID, REDIS_PORT, REDIS_URI, REDIS_DIR
#   redis_cli ARGS...  a raw command to it
#   redis_stop

redis_free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis_cli() {
  redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

redis_start() {
  REDIS_DIR=$(mktemp -d /tmp/rlc-pkg-redis-XXXXXX)
  local attempt i
  for attempt in 1 2 3 4 5; do
    REDIS_PORT=$(redis_free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
      --daemonize no --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis.log" &
    REDIS_PID=$!
    for i in $(seq 200); do # 10 s
      kill -0 "$REDIS_PID" 2>/dev/null || break # lost the port race: next one
      if [ "$(redis_cli ping 2>/dev/null)" = PONG ]; then
        REDIS_URI=redis://127.0.0.1:$REDIS_PORT
        return 0
      fi
      sleep 0.05
    done
    redis_stop_pid
  done
  echo "redis-server did not start; log:" >&2
  cat "$REDIS_DIR/redis.log" >&2
  return 1
}

redis_stop_pid() {
  [ -n "${REDIS_PID:-}" ] || return 0
  kill "$REDIS_PID" 2>/dev/null
  local i
  for i in $(seq 100); do # 5 s, then SIGKILL
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$REDIS_PID" 2>/dev/null
  wait "$REDIS_PID" 2>/dev/null
  REDIS_PID=
}

redis_stop() {
  redis_stop_pid
  [ -n "${REDIS_DIR:-}" ] && rm -rf "$REDIS_DIR"
  REDIS_DIR=
}
