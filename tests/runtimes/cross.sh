#!/usr/bin/env bash
# Mutual exclusion across runtimes: a C, a Node, a Ruby and a Go process (and
# a Python one when bindings/python is built) increment one file counter
# under one lock name on one real redis-server. The critical section
# (participants/counter.c) reads, sleeps 1 ms and writes, so any overlap
# loses updates; it also marks itself with an O_EXCL file, so an overlap is
# counted even when no update is lost.
#
# All start together: a gate process holds the lock while every participant
# reports "ready" on a FIFO, then releases it on SIGUSR1.
#
# Run by run.sh, which sets REDIS_URIS, RT_WORK, RT_COUNTER, RT_GO_COUNTER,
# RT_LIBDIR and PYTHON_OK (1 when bindings/python imports).
set -euo pipefail
cd "$(dirname "$0")/../.."
ITERATIONS=${RT_CROSS_ITERATIONS:-40}
LIMIT=180 # seconds any one participant may take
uri=${REDIS_URIS%%,*}
dir=$RT_WORK/cross
lock=cross-counter-$$
mkdir -p "$dir"
mkfifo "$dir/ready"
exec {ready}<>"$dir/ready"

labels=(c node ruby go)
commands=(
  "$RT_COUNTER|$uri|$lock|$dir|$ITERATIONS|c|$dir/ready"
  "node|tests/runtimes/participants/counter.js|$uri|$lock|$dir|$ITERATIONS|node|$dir/ready"
  "ruby|-Ibindings/ruby/lib|tests/runtimes/participants/counter.rb|$uri|$lock|$dir|$ITERATIONS|ruby|$dir/ready"
  "$RT_GO_COUNTER|$uri|$lock|$dir|$ITERATIONS|go|$dir/ready"
)
if [ "${PYTHON_OK:-0}" = 1 ]; then
  labels+=(python)
  commands+=("/usr/bin/python3|tests/runtimes/participants/counter.py|$uri|$lock|$dir|$ITERATIONS|python|$dir/ready")
fi

"$RT_COUNTER" gate "$uri" "$lock" "$dir/ready" &
gate=$!
read -r -t 30 line <&"$ready" || { echo "the gate did not take the lock"; exit 1; }
[ "$line" = "held gate" ] || { echo "gate said: $line"; exit 1; }

pids=()
for i in "${!labels[@]}"; do
  IFS='|' read -r -a argv <<<"${commands[$i]}"
  REDLOCKC_LIBRARY=$RT_LIBDIR/libredlockc.so.1 LD_LIBRARY_PATH=$RT_LIBDIR \
    timeout -k 5 "$LIMIT" "${argv[@]}" >"$dir/${labels[$i]}.out" 2>&1 &
  pids+=($!)
done

fail=0
for _ in "${labels[@]}"; do
  if ! read -r -t 60 line <&"$ready"; then
    echo "not every participant became ready within 60 s; stopping them"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    fail=1
    break
  fi
done
start=$SECONDS
kill -USR1 "$gate"
wait "$gate" || { echo "the gate failed to release"; fail=1; }

for i in "${!labels[@]}"; do
  if wait "${pids[$i]}"; then
    echo "  $(cat "$dir/${labels[$i]}.out")"
  else
    echo "  ${labels[$i]} FAILED (exit $?):"
    sed 's/^/    /' "$dir/${labels[$i]}.out"
    fail=1
  fi
done

expected=$((ITERATIONS * ${#labels[@]}))
seen=$(cat "$dir/counter" 2>/dev/null || echo missing)
echo "  counter: expected $expected, seen $seen (${#labels[@]} runtimes x $ITERATIONS, $((SECONDS - start)) s)"
[ "$seen" = "$expected" ] || fail=1
exit $fail
