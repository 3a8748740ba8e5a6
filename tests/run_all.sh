#!/usr/bin/env bash
# Runs every test suite: the README's test command and what CI runs.
#   bash tests/run_all.sh          all suites
#   bash tests/run_all.sh c python only those (names below)
# Each suite is a script of its own; it gets the build directory in
# RLC_BUILD_DIR (built here once with every optional part on).
set -euo pipefail
cd "$(dirname "$0")/.."
export RLC_BUILD_DIR=${RLC_BUILD_DIR:-$PWD/build}

SUITES=(c python lua openresty packaging runtimes fault fuzz valkey interop classic compat)
if (($#)); then SUITES=("$@"); fi

# -Werror here (and in CI), not for users: see RLC_WERROR in CMakeLists.txt.
cmake -S . -B "$RLC_BUILD_DIR" -DRLC_WERROR=ON -DRLC_PYTHON=ON -DRLC_LUA=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build "$RLC_BUILD_DIR" -j"$(nproc)"

declare -A SCRIPT=(
  [c]=tests/c/run.sh
  [python]=tests/python/run.sh
  [lua]=tests/lua/run.sh
  [openresty]=tests/openresty/run.sh
  [packaging]=tests/packaging/run.sh
  [runtimes]=tests/runtimes/run.sh
  [fault]="tests/fault/run.sh short"
  [fuzz]="tests/fuzz/run.sh 60"
  [valkey]=tests/valkey/run.sh
  [interop]=tests/interop/run.sh
  [classic]=tests/interop/classic/run.sh
  [compat]=tests/compat/run.sh
)

failed=()
for s in "${SUITES[@]}"; do
  echo "=== suite: $s ==="
  start=$SECONDS
  if bash ${SCRIPT[$s]}; then
    echo "=== suite $s passed ($((SECONDS - start)) s) ==="
  else
    echo "=== suite $s FAILED ($((SECONDS - start)) s) ==="
    failed+=("$s")
  fi
done
passed=$((${#SUITES[@]} - ${#failed[@]}))
if ((${#failed[@]})); then
  echo "FAILED suites: ${failed[*]}"
  echo "suites: $passed passed, ${#failed[@]} failed"
  exit 1
fi
echo "all suites passed"
echo "suites: $passed passed, 0 failed"
