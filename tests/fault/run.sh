#!/usr/bin/env bash
# run.sh - the fault suite: the mutual-exclusion checker under every fault
# scenario, against real redis-server processes it starts and stops itself.
#
#   bash tests/fault/run.sh [short|long] [SCENARIO...]
#
#   short  CI profile: each scenario once, 4 processes x 4 threads, 2 s of
#          load between fault steps (about 1 minute for all seven).
#   long   soak profile for manual runs: each fault repeated 6 times with
#          15 s of load between steps (about 20 minutes for all seven).
#
# Builds fault_check and fault_repro in $RLC_BUILD_DIR (default: build/),
# runs the checker's self test, then each scenario in turn; every scenario
# prints its figures (acquisitions, overlaps, lost updates, tokens out of
# order, NO_QUORUM counts, recovery times). Then the deterministic
# reproducers of library bugs the scenarios found (repro.c; skipped when
# SCENARIOs are named). A table of the FIGURES lines closes the run; full
# logs stay in $RLC_BUILD_DIR/fault-logs/. Exit status 0 iff all passed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${RLC_BUILD_DIR:-$root/build}
profile=${1:-short}
case $profile in
  short|long) shift || true ;;
  *) echo "usage: $0 [short|long] [SCENARIO...]" >&2; exit 2 ;;
esac
command -v redis-server >/dev/null || { echo "run.sh: redis-server is not installed" >&2; exit 2; }

[[ -f $build/CMakeCache.txt ]] || cmake -S "$root" -B "$build" -DRLC_WERROR=ON >/dev/null
cmake --build "$build" --target fault_check fault_repro -j"$(nproc)" >/dev/null
exe=$build/tests/fault/fault_check
logs=$build/fault-logs
mkdir -p "$logs"

"$exe" selftest
repro=1
if (($#)); then scenarios=("$@"); repro=0; else mapfile -t scenarios < <("$exe" list); fi

failed=()
start=$SECONDS
for s in "${scenarios[@]}"; do
  t=$SECONDS
  if "$exe" "$s" "$profile" 2>&1 | tee "$logs/$s.$profile.log"; then
    echo "--- $s: passed in $((SECONDS - t)) s"
  else
    echo "--- $s: FAILED in $((SECONDS - t)) s (log: $logs/$s.$profile.log)"
    failed+=("$s")
  fi
done

if ((repro)); then
  echo "=== reproducers of library bugs (tests/fault/repro.c)"
  if "$build/tests/fault/fault_repro" 2>&1 | tee "$logs/repro.log"; then
    echo "--- repro: passed"
  else
    echo "--- repro: FAILED (log: $logs/repro.log)"
    failed+=(repro)
  fi
fi

echo
echo "=== fault suite ($profile profile, $((SECONDS - start)) s): figures per scenario"
for s in "${scenarios[@]}"; do
  grep -h '^FIGURES' "$logs/$s.$profile.log" | sed 's/^FIGURES //' | tr ' ' '\n' |
    paste -sd' ' - | sed 's/^/  /' || echo "  scenario=$s (no figures)"
done
if ((${#failed[@]})); then
  echo "FAILED scenarios: ${failed[*]}"
  exit 1
fi
echo "all fault scenarios passed"
