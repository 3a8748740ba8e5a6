#!/usr/bin/env bash
# run.sh - the fault suite: the mutual-exclusion checker under every fault
# scenario, against real redis-server processes it starts and stops itself.
#
#   bash tests/fault/run.sh [short|long] [SCENARIO...]
#   bash tests/fault/run.sh regress [CASE...]        issue 14 regression tests
#   bash tests/fault/run.sh schedule [short|long|one] [SEED]
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
#
#   regress   the regression tests of issue 14 (regress.c), one per
#             observation, on real TCP faults (proxy, nftables in a network
#             namespace); short and long run them too, then the schedule.
#   schedule  the randomized fault schedule (schedule.c): short about 2.5 min,
#             long about 60 min; prints its seed; replay a whole run with
#             the same SEED, one schedule with `schedule one SEED`.
# regress and schedule need root, iproute2 and nftables (network namespaces);
# any namespace a killed run left behind is deleted on exit (trap).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${RLC_BUILD_DIR:-$root/build}
profile=${1:-short}
case $profile in
  short|long|regress|schedule) shift || true ;;
  *) echo "usage: $0 [short|long] [SCENARIO...] | regress [CASE...] | schedule [short|long|one] [SEED]" >&2; exit 2 ;;
esac
command -v redis-server >/dev/null || { echo "run.sh: redis-server is not installed" >&2; exit 2; }

[[ -f $build/CMakeCache.txt ]] || cmake -S "$root" -B "$build" -DRLC_WERROR=ON >/dev/null
logs=$build/fault-logs
mkdir -p "$logs"

# Namespaces made by this run's programs carry this prefix; whatever a
# crashed or killed program left is removed here, also on failure.
export RLC_NETNS_PREFIX=rlcf$$_
cleanup_netns() {
  local n
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$RLC_NETNS_PREFIX" || true); do
    ip netns del "$n" 2>/dev/null || true
  done
}
trap cleanup_netns EXIT INT TERM

if [[ $profile == regress ]]; then
  cmake --build "$build" --target fault_regress -j"$(nproc)" >/dev/null
  exe=$build/tests/fault/fault_regress
  if (($#)); then cases=("$@"); else
    mapfile -t cases < <(grep -o 'CASE([a-z0-9_]*)' "$root/tests/fault/regress.c" | sed 's/CASE(\(.*\))/\1/')
  fi
  failed=()
  for c in "${cases[@]}"; do
    if ! timeout 120 "$exe" "$c" 2>&1 | tee -a "$logs/regress.log"; then failed+=("$c"); fi
  done
  echo "=== regress: $((${#cases[@]} - ${#failed[@]})) of ${#cases[@]} passed"
  if ((${#failed[@]})); then printf 'FAILED: %s\n' "${failed[@]}"; exit 1; fi
  exit 0
fi
if [[ $profile == schedule ]]; then
  cmake --build "$build" --target fault_schedule -j"$(nproc)" >/dev/null
  sp=${1:-short}
  shift || true
  set +e
  timeout 4000 "$build/tests/fault/fault_schedule" "$sp" "$@" 2>&1 | tee "$logs/schedule.$sp.log"
  rc=${PIPESTATUS[0]}
  set -e
  grep '^VIOLATION' "$logs/schedule.$sp.log" | sed 's/^/  /' || true
  exit "$rc"
fi
cmake --build "$build" --target fault_check fault_repro fault_regress -j"$(nproc)" >/dev/null
exe=$build/tests/fault/fault_check

"$exe" selftest
repro=1
if (($#)); then scenarios=("$@"); repro=0; else mapfile -t scenarios < <("$exe" list); fi

failed=()
start=$SECONDS
if ((repro)); then
  # The fault layer's own checks and one regression test per observation of
  # the safety issue (regress.c), on real TCP faults; then the randomized
  # schedule (schedule.c) of the profile.
  echo "=== regression tests on real network faults (tests/fault/regress.c)"
  cmake --build "$build" --target fault_schedule -j"$(nproc)" >/dev/null
  mapfile -t cases < <(grep -o 'CASE([a-z0-9_]*)' "$root/tests/fault/regress.c" | sed 's/CASE(\(.*\))/\1/')
  for c in "${cases[@]}"; do
    timeout 120 "$build/tests/fault/fault_regress" "$c" 2>&1 | tee -a "$logs/regress.log" || failed+=("$c")
  done
  echo "=== randomized fault schedule ($profile)"
  set +e
  timeout 4000 "$build/tests/fault/fault_schedule" "$profile" 2>&1 | tee "$logs/schedule.$profile.log"
  rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || failed+=("schedule")
fi
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
