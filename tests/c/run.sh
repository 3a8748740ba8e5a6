#!/usr/bin/env bash
# The C suite: plain, then under ASan+UBSan, under TSan, and under valgrind
# memcheck (no leaks, no errors). Each sanitizer build has its own directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${RLC_BUILD_DIR:-$PWD/build}
jobs=$(nproc)

echo "--- C tests"
cmake --build "$BUILD" -j"$jobs" >/dev/null
# Most cases wait on servers and timers: two per core. The simulation is
# all CPU: it runs after them, one schedule range per core.
ctest --test-dir "$BUILD" -L '^c$' -E '^sim\.' -j"$((2 * jobs))" --output-on-failure
ctest --test-dir "$BUILD" -L '^c$' -R '^sim\.' -j"$jobs" --output-on-failure

# clang compiles everything with its own warnings as errors and runs the
# cases that need no server; the cases against servers ran above, and run
# again under the sanitizers and valgrind below and against Valkey (the
# valkey suite): CI's time goes there instead.
echo "--- C build with clang (-Wall -Wextra -Werror)"
CC=clang cmake -S . -B "$BUILD-clang" -DRLC_WERROR=ON >/dev/null
cmake --build "$BUILD-clang" -j"$jobs" >/dev/null
ctest --test-dir "$BUILD-clang" -L '^c$' -R '^(parsers|quorum|lock_calls|restart_rule)\.' \
  -j"$jobs" --output-on-failure

for san in ASAN TSAN; do
  dir=$BUILD-${san,,}
  echo "--- C tests under ${san}"
  cmake -S . -B "$dir" -DRLC_${san}=ON -DRLC_WERROR=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ctest --test-dir "$dir" -L '^c$' -j"$((2 * jobs))" --output-on-failure
done

echo "--- C tests under valgrind memcheck"
# One valgrind per case, one per core (valgrind runs a program's threads
# one at a time, and its cases time their servers: more at once made some
# miss their bounds). Each case's log is kept and printed in order.
logs=$(mktemp -d)
for exe in "$BUILD"/tests/test_*; do
  [ -x "$exe" ] || continue
  area=$(basename "$exe"); area=${area#test_}
  for case in $(ctest --test-dir "$BUILD" -N -L '^c$' | sed -n "s/.*Test *#[0-9]*: ${area}\.\([a-z0-9_]*\)$/\1/p"); do
    echo "$exe $case"
  done
done >"$logs/cases"
# shellcheck disable=SC2016
xargs -a "$logs/cases" -P "$jobs" -n 2 bash -c '
  logs=$1 exe=$2 case=$3 area=$(basename "$2"); area=${area#test_}
  if valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect \
       --suppressions="$0/tests/c/valgrind.supp" \
       --error-exitcode=99 "$exe" "$case" >"$logs/$area.$case.log" 2>&1; then
    mv "$logs/$area.$case.log" "$logs/$area.$case.ok"
  fi' "$PWD" "$logs" || true
fail=0
while read -r exe case; do
  area=$(basename "$exe"); area=${area#test_}
  if [ -f "$logs/$area.$case.ok" ]; then
    echo "valgrind ok   $area.$case"
  else
    echo "valgrind FAIL $area.$case"; cat "$logs/$area.$case.log" 2>/dev/null; fail=1
  fi
done <"$logs/cases"
rm -rf "$logs"
exit $fail
