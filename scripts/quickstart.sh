#!/usr/bin/env bash
# The README's first command: installs what is missing (as root), builds
# everything, and shows the redlockc command at work:
#   sudo bash scripts/quickstart.sh
# A redis-server on 127.0.0.1:$DEMO_PORT (default 6399) is started if none
# listens there, and stopped again at the end; an existing one is only used.
# Five workers append five lines each, a little apart, to one file: first
# with no lock (their lines interleave), then each under `redlockc` (each
# worker's lines stay together). The script checks both and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
TOP=$PWD
BUILD=${RLC_BUILD_DIR:-$TOP/build}
PORT=${DEMO_PORT:-6399}
WORKERS=5
LINES=5
LOCK=quickstart-demo

step() { printf '\n== %s\n' "$*"; }

step "1. dependencies"
if [ "$(id -u)" -eq 0 ]; then
  bash scripts/install-deps.sh
else
  echo "not root: skipping scripts/install-deps.sh (run with sudo to install missing packages)"
fi

step "2. build (cmake, into ${BUILD#$TOP/})"
cmake --no-warn-unused-cli -S . -B "$BUILD" -DRLC_PYTHON=ON -DRLC_LUA=ON -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
REDLOCKC=$BUILD/c/tools/redlockc
"$REDLOCKC" --version

step "3. redis-server on 127.0.0.1:$PORT"
work=$(mktemp -d /tmp/redlockc-quickstart-XXXXXX)
redis_pid=
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    echo "stopped the redis-server this script started (pid $redis_pid)"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
ping() { redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null; }
if [ "$(ping)" = PONG ]; then
  echo "a Redis already listens on $PORT: using it"
elif (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "something that is not Redis listens on $PORT: choose another DEMO_PORT" >&2
  exit 1
else
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize no --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do [ "$(ping)" = PONG ] && break; sleep 0.05; done # 5 s at most
  [ "$(ping)" = PONG ] || { echo "redis-server did not start:" >&2; cat "$work/redis.log" >&2; exit 1; }
  echo "started redis-server (pid $redis_pid)"
fi
export REDLOCKC_NODES=redis://127.0.0.1:$PORT

# What each worker does: LINES lines, 50 ms apart, appended to $1.
work_script='for i in $(seq '$LINES'); do
  echo "worker $W line $i${REDLOCKC_FENCING_TOKEN:+ (fencing token $REDLOCKC_FENCING_TOKEN)}" >> "$1"
  sleep 0.05
done'

# Prints the file, then who wrote each line, in file order. A run is a stretch
# of lines by one worker: contiguous iff there are exactly WORKERS runs.
report() {
  cat "$1"
  echo "writers, line by line: $(awk '{print $2}' "$1" | xargs)"
  runs=$(awk '$2 != last { runs++ } { last = $2 } END { print runs + 0 }' "$1")
}

step "4. $WORKERS workers at once, no lock"
: >"$work/nolock.txt"
pids=()
for w in $(seq $WORKERS); do
  W=$w sh -c "$work_script" sh "$work/nolock.txt" &
  pids+=($!)
done
wait "${pids[@]}" # not a bare wait: the redis-server is a child too
report "$work/nolock.txt"
if [ "$runs" -gt "$WORKERS" ]; then
  echo "=> interleaved: $runs runs of lines for $WORKERS workers"
else
  echo "=> happened not to interleave this time ($runs runs); without a lock nothing prevents it"
fi

step "5. $WORKERS workers at once, each under: redlockc $LOCK -- sh -c ..."
: >"$work/locked.txt"
pids=()
for w in $(seq $WORKERS); do
  W=$w "$REDLOCKC" --wait 30 "$LOCK" -- sh -c "$work_script" sh "$work/locked.txt" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
report "$work/locked.txt"
lines=$(wc -l <"$work/locked.txt")
if [ "$failed" -eq 0 ] && [ "$runs" -eq "$WORKERS" ] && [ "$lines" -eq $((WORKERS * LINES)) ]; then
  echo "=> never interleaved: $WORKERS runs of $LINES lines, one per worker, all exited 0"
else
  echo "=> FAILED: $runs runs, $lines lines, $failed workers failed" >&2
  exit 1
fi

step "6. the other outcomes"
"$REDLOCKC" "$LOCK" -- sleep 2 &
holder=$!
for _ in $(seq 200); do "$REDLOCKC" status "$LOCK" >/dev/null && break; sleep 0.01; done
echo "\$ redlockc status $LOCK"
"$REDLOCKC" status "$LOCK" || true
echo "\$ redlockc --wait 0 $LOCK -- true"
set +e
"$REDLOCKC" --wait 0 "$LOCK" -- true
echo "exit status $? (busy)"
set -e
wait "$holder"
echo "\$ redlockc $LOCK -- sh -c 'exit 3'"
set +e
"$REDLOCKC" "$LOCK" -- sh -c 'exit 3'
echo "exit status $? (CMD's own)"
set -e
echo
echo "Done. Next: bash tests/run_all.sh (every test suite); man $BUILD/c/tools/redlockc.1.gz"
