# shellcheck shell=bash
# Sourced by tests/runtimes/*.sh: small helpers around rt_serve, which starts
# and stops real redis-server processes with tests/support/redis_server.c.
#
#   start_redis N    sets REDIS_URIS (comma-separated) and REDIS_SERVE_PID
#   stop_redis       stops them (by pid) and waits, at most 15 s
#
# Needs RT_SERVE (the rt_serve binary) and RT_WORK (a scratch directory).

die() {
  echo "runtimes: $*" >&2
  exit 1
}

# Every tool a suite needs must be there: a missing one fails the run.
require_tools() {
  local missing=()
  for t in "$@"; do command -v "$t" >/dev/null || missing+=("$t"); done
  ((${#missing[@]} == 0)) || die "missing: ${missing[*]} (scripts/install-deps.sh installs them)"
}

start_redis() {
  local n=${1:-1} fifo line fd
  fifo=$(mktemp -u "$RT_WORK/serve-XXXXXX")
  mkfifo "$fifo"
  exec {fd}<>"$fifo" # read-write: rt_serve's open never blocks, we never see EOF
  "$RT_SERVE" "$n" "$fifo" &
  if ! read -r -t 30 line <&"$fd"; then
    exec {fd}<&-
    die "redis-server did not start within 30 s"
  fi
  exec {fd}<&-
  rm -f "$fifo"
  # shellcheck disable=SC2034 # read by the suites
  REDIS_URIS=${line% *}
  REDIS_SERVE_PID=${line##* }
}

stop_redis() {
  [ -n "${REDIS_SERVE_PID:-}" ] || return 0
  local pid=$REDIS_SERVE_PID guard
  REDIS_SERVE_PID=
  kill -TERM "$pid" 2>/dev/null || true
  # rs_stop is bounded (3 s a server, then SIGKILL); the guard bounds the
  # rest: SIGKILL after 15 s, and its servers die with it (PDEATHSIG).
  (sleep 15 && kill -KILL "$pid") >/dev/null 2>&1 &
  guard=$!
  wait "$pid" 2>/dev/null || true
  kill "$guard" 2>/dev/null || true
  wait "$guard" 2>/dev/null || true
}
