#!/usr/bin/env bash
# The runtime bindings suite (issue 10): Node.js (koffi), Ruby (Fiddle) and
# Go (cgo) against real redis-server processes, then one lock shared by a C,
# a Node, a Ruby and a Go process (and Python when bindings/python builds).
#
#   bash tests/runtimes/run.sh [node|ruby|go|cross ...]    (default: all)
#
# The bindings use the library as a user gets it: `cmake --install` of
# $RLC_BUILD_DIR into a scratch prefix, found through its redlockc.pc.
# node, npm, ruby or go missing is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${RLC_BUILD_DIR:-$ROOT/build}
SUITES=(node ruby go cross)
if (($#)); then SUITES=("$@"); fi
source tests/runtimes/lib.sh

require_tools cc cmake pkg-config redis-server node npm ruby go timeout mkfifo

RT_WORK=$(mktemp -d /tmp/rlc-runtimes-XXXXXX)
cleanup() {
  stop_redis
  rm -rf "$RT_WORK"
}
trap cleanup EXIT
export RT_WORK

# ---- the library, installed into a scratch prefix ------------------------
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" >/dev/null
cmake --install "$BUILD" --prefix "$RT_WORK/prefix" >/dev/null
pc=$(find "$RT_WORK/prefix" -name redlockc.pc -print -quit)
if [ -z "$pc" ]; then
  # Only while packaging/ installs none: the same fields, written here.
  lib=$(dirname "$(find "$RT_WORK/prefix" -name 'libredlockc.so.1' -print -quit)")
  mkdir -p "$lib/pkgconfig"
  pc=$lib/pkgconfig/redlockc.pc
  # shellcheck disable=SC2016 # ${libdir} is for pkg-config
  printf 'prefix=%s\nlibdir=%s\nincludedir=%s/include\n\nName: redlockc\nDescription: distributed locks on Redis\nVersion: 1.0.0\nLibs: -L${libdir} -lredlockc\nCflags: -I${includedir}\n' \
    "$RT_WORK/prefix" "$lib" "$RT_WORK/prefix" >"$pc"
  echo "note: no redlockc.pc was installed; using a generated one"
fi
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
RT_LIBDIR=$(pkg-config --variable=libdir redlockc)
[ -e "$RT_LIBDIR/libredlockc.so.1" ] || die "no libredlockc.so.1 in $RT_LIBDIR (from $pc)"
export RT_LIBDIR
echo "library: $RT_LIBDIR/libredlockc.so.1 (pkg-config: $pc)"

# ---- helpers: rt_serve (tests/support) and the C participant --------------
export RT_SERVE=$RT_WORK/rt_serve RT_COUNTER=$RT_WORK/counter
read -r -a hiredis <<<"$(pkg-config --cflags --libs hiredis)"
read -r -a rlc_cflags <<<"$(pkg-config --cflags redlockc)"
read -r -a rlc_libs <<<"$(pkg-config --libs redlockc)"
cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -Itests/support -o "$RT_SERVE" \
  tests/runtimes/rt_serve.c tests/support/redis_server.c "${hiredis[@]}"
cc -std=c11 -O2 -Wall -Wextra -Werror "${rlc_cflags[@]}" -o "$RT_COUNTER" \
  tests/runtimes/participants/counter.c "${rlc_libs[@]}" -Wl,-rpath,"$RT_LIBDIR"

# ---- the suites, each with a server of its own -----------------------------
# koffi from the npm registry (never committed), then the helper library.
node_deps() {
  (cd bindings/node &&
    if [ -f package-lock.json ]; then npm ci --no-audit --no-fund --loglevel=error; else npm install --no-audit --no-fund --loglevel=error; fi &&
    node build.js)
}

suite_node() {
  node_deps && (cd bindings/node && RLC_TEST_REDIS=$REDIS_URIS node --test --test-timeout=120000 test/*.test.js)
}

suite_ruby() {
  REDLOCKC_LIBRARY=$RT_LIBDIR/libredlockc.so.1 RLC_TEST_REDIS=$REDIS_URIS \
    timeout -k 5 300 ruby -Ibindings/ruby/lib bindings/ruby/test/test_redlockc.rb &&
    RLC_TEST_REDIS=$REDIS_URIS timeout -k 5 120 ruby bindings/ruby/test/test_install.rb
}

# The redlockc module uses the standard library only (no download:
# GOPROXY=off); its promredlock module (Prometheus) gets client_golang from
# the Go module proxy, checked against its go.sum. Go 1.19
# does not count pkg-config's output in its build cache key, so a package
# built against an earlier scratch prefix would link with that prefix's
# (deleted) -L. CGO_* flags are counted: name the prefix and the header's
# hash there, and give the binaries an rpath to the library.
header_hash=$(sha1sum "$(pkg-config --variable=includedir redlockc)/redlockc.h" | cut -c1-12)
export GOPROXY=off GOFLAGS=-buildvcs=false CGO_ENABLED=1 \
  CGO_CFLAGS="-g -O2 -DRLC_HEADER_${header_hash}" \
  CGO_LDFLAGS="-g -O2 -L$RT_LIBDIR -Wl,-rpath,$RT_LIBDIR"
suite_go() {
  (cd bindings/go && go vet ./... &&
    LD_LIBRARY_PATH=$RT_LIBDIR RLC_TEST_REDIS=$REDIS_URIS go test -race -count=1 -timeout 180s -v ./...) &&
    (cd bindings/go/promredlock && export GOPROXY=https://proxy.golang.org,direct && go vet ./... &&
      LD_LIBRARY_PATH=$RT_LIBDIR RLC_TEST_REDIS=$REDIS_URIS go test -race -count=1 -timeout 120s -v ./...)
}

suite_cross() {
  export RT_GO_COUNTER=$RT_WORK/go_counter PYTHON_OK=0
  # (in an if: set -e does not reach into it)
  (cd tests/runtimes/participants/go && go build -o "$RT_GO_COUNTER" .) || return 1
  [ -d bindings/node/node_modules/koffi ] || node_deps || return 1 # for the Node participant
  if [ -d bindings/python ]; then
    echo "note: bindings/python exists; adding it when it imports"
    if PYTHONPATH=$(python_path) /usr/bin/python3 -c 'import redlockc' 2>/dev/null; then
      PYTHON_OK=1
    else
      echo "note: bindings/python does not import here; no Python participant"
    fi
  fi
  REDIS_URIS=$REDIS_URIS PYTHONPATH=$(python_path) bash tests/runtimes/cross.sh
}

# Where a built Python module would be: the build tree, then the sources.
python_path() {
  echo "$BUILD/bindings/python:$ROOT/bindings/python"
}

passed=()
failed=()
for s in "${SUITES[@]}"; do
  declare -F "suite_$s" >/dev/null || die "unknown suite '$s' (node ruby go cross)"
  echo "--- runtimes: $s"
  start_redis 1
  if "suite_$s"; then passed+=("$s"); else failed+=("$s"); fi
  stop_redis
done
((${#failed[@]} == 0)) || echo "FAILED runtime suites: ${failed[*]}"
echo "runtimes: ${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
