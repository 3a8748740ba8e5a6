#!/usr/bin/env bash
# The Lua 5.4 suite (bash tests/run_all.sh lua): the module built in
# RLC_BUILD_DIR (configured with -DRLC_LUA=ON; default build/) against real
# redis-servers on free loopback ports:
#   test_api.lua        results, integers, reentrancy, leases, errors, <close>, GC
#   test_exclusion.lua  two lua5.4 processes, one lock, a racy counter file
#   test_family.lua     read-write lock, fair lock, semaphores, multi-name lock
#   test_logs.lua       client:logs(), the log lines queued from library threads
#   test_fencing.lua    the fencing option: no key left by default (a server of its own)
#   test_classic.lua    format = "classic": a string key, not reentrant, none left
#   gc_loop.lua         10,000 dropped lock handles under valgrind: no leak
#   smoke.lua           also over rediss:// (tests/tls/make_certs.sh certificates)
# Fails (never skips) when lua5.4, valgrind or the built module is missing.
set -uo pipefail
cd "$(dirname "$0")/../.."
TOP=$PWD
HERE=$TOP/tests/lua
BUILD=${RLC_BUILD_DIR:-$TOP/build}
source "$HERE/servers.sh"

failures=()
fail() { echo "FAIL - $*"; failures+=("$1"); }

for tool in lua5.4 valgrind redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "FAIL - $tool is not installed"; exit 1; }
done
if [ ! -f "$BUILD/bindings/lua/redlockc_core.so" ]; then
  echo "FAIL - $BUILD/bindings/lua/redlockc_core.so is missing:"
  echo "       configure with -DRLC_LUA=ON and build (cmake --build $BUILD)"
  exit 1
fi

work=$(mktemp -d /tmp/rlc-lua-XXXXXX)
cleanup() {
  redis_stop_all
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM # so that the EXIT trap runs on these too

for s in REDIS NODE1 NODE2 NODE3 FENCE; do
  redis_start $s || { echo "FAIL - redis-server $s did not start"; exit 1; }
done
dead=$(free_port) && dead2=$(free_port) || { echo "FAIL - no free port"; exit 1; }

# The C module from the build tree, redlockc.lua from the source tree (what
# is being tested), the harness from here.
export LUA_CPATH="$BUILD/bindings/lua/?.so"
export LUA_PATH="$TOP/bindings/lua/?.lua;$HERE/?.lua"
export REDIS_URI REDIS_PORT FENCE_URI FENCE_PORT NODE1_URI NODE2_URI NODE3_URI NODE1_PORT NODE2_PORT NODE3_PORT
export DEAD_URI=redis://127.0.0.1:$dead DEAD2_URI=redis://127.0.0.1:$dead2
export RLC_HEADER=$TOP/c/include/redlockc.h RLC_LUA_WORK=$work RLC_LUA_TESTS=$HERE

parts_passed=0
run() { # NAME CMD...: a part of the suite, timed
  local name=$1 start=$SECONDS
  shift
  echo "--- lua: $name"
  if "$@"; then
    parts_passed=$((parts_passed + 1))
    echo "--- lua: $name passed ($((SECONDS - start)) s)"
  else
    fail "$name" "(exit $?)"
  fi
}

run "api" lua5.4 "$HERE/test_api.lua"
run "two processes" lua5.4 "$HERE/test_exclusion.lua"
run "lock family" lua5.4 "$HERE/test_family.lua"
run "client:logs()" lua5.4 "$HERE/test_logs.lua"
run "fencing option" lua5.4 "$HERE/test_fencing.lua"
run "classic format" lua5.4 "$HERE/test_classic.lua"

# rediss://: the blocking client's own TLS (the C library's OpenSSL), against
# a TLS-only server; a CA that did not sign its certificate is nil, err.
over_tls() {
  local out
  bash "$TOP/tests/tls/make_certs.sh" "$work/certs" &&
    redis_start_tls TLS "$work/certs" server no || return 1
  out=$(lua5.4 "$HERE/smoke.lua" "$TLS_URI" lua:tls "tls_ca_file=$work/certs/ca.crt" 2>&1)
  echo "over rediss://: $out"
  [ "$out" = "acquired, owned=true, count=1, released" ] || return 1
  out=$(lua5.4 - "$TLS_URI" "tls_ca_file=$work/certs/other-ca.crt" 2>&1 <<'LUA'
local redlockc = require "redlockc"
local c = assert(redlockc.client(arg[1], arg[2]))
local l = assert(c:lock("lua:tls"))
print(l:acquire{ wait_ms = 0 })
LUA
)
  echo "another CA: $out"
  [[ $out == nil*"TLS handshake with 127.0.0.1:"*"certificate verify failed"* ]]
}
run "rediss:// (blocking TLS)" over_tls

# valgrind: definite or indirect leaks, or any memory error, fail the run.
# (Still-reachable blocks are the Lua interpreter's and libc's own.)
gc_loop() {
  valgrind --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    --log-file="$work/valgrind.log" lua5.4 "$HERE/gc_loop.lua"
  local rc=$?
  # The summary, and any report valgrind made (a leak or memory error).
  grep -v '^==[0-9]*== *$' "$work/valgrind.log" |
    sed -n '/HEAP SUMMARY/,$p;/Invalid\|uninitialised\|are definitely\|are indirectly/p'
  return $rc
}
run "10,000 locks freed by __gc under valgrind" gc_loop

# cmake --install (components runtime + lua) into a temporary prefix: the
# module loads from there with no LD_LIBRARY_PATH (its RUNPATH finds
# libredlockc.so.1 relative to itself), and a standard prefix is on
# lua5.4's default search path.
# lua5.4 without this suite's LUA_PATH and LUA_CPATH: its own defaults.
plain_lua() { env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 lua5.4 "$@"; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
prefix=$work/prefix
installed() {
  local comp
  for comp in runtime dev lua; do
    cmake --install "$BUILD" --prefix "$prefix" --component $comp >/dev/null || return 1
  done
  local cmod lmod rdir so out
  cmod=$(cache RLC_LUA_CMOD_DIR) lmod=$(cache RLC_LUA_LMOD_DIR) rdir=$(cache RLC_LUA_RESTY_DIR)
  so=$prefix/$cmod/redlockc_core.so
  for f in "$so" "$prefix/$lmod/redlockc.lua" "$prefix/$rdir/resty/redlockc.lua" \
    "$prefix/$rdir/resty/redlockc/blocking.lua"; do
    [ -f "$f" ] || { echo "missing after install: $f"; return 1; }
  done
  echo "RUNPATH: $(readelf -d "$so" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  # ldd's output is captured, not piped into grep -q: under pipefail a grep
  # that stops reading at its match makes ldd die of SIGPIPE, failing the check.
  local deps
  deps=$(env -u LD_LIBRARY_PATH ldd "$so") || { echo "ldd $so failed"; return 1; }
  echo "ldd: $(grep redlockc <<<"$deps")"
  grep -q "=> $prefix/.*libredlockc.so.1" <<<"$deps" || {
    echo "the installed module does not find $prefix's libredlockc.so.1 by itself"
    return 1
  }
  out=$(env -u LD_LIBRARY_PATH LUA_CPATH="$prefix/$cmod/?.so" LUA_PATH="$prefix/$lmod/?.lua" \
    lua5.4 "$HERE/smoke.lua" "$REDIS_URI" lua:installed 2>&1)
  echo "installed module: $out"
  [ "$out" = "acquired, owned=true, count=1, released" ] || return 1
  local p
  p=$(cache CMAKE_INSTALL_PREFIX)
  if [ "$p" = /usr/local ] || [ "$p" = /usr ]; then
    grep -qx "$p/$cmod/?.so" <<<"$(plain_lua -e 'print(package.cpath)' | tr ';' '\n')" &&
      grep -qx "$p/$lmod/?.lua" <<<"$(plain_lua -e 'print(package.path)' | tr ';' '\n')" || {
      echo "$p/$cmod or $p/$lmod is not on lua5.4's default search path"
      return 1
    }
    echo "$p/$cmod and $p/$lmod are on lua5.4's default search path"
  fi
}
run "cmake --install" installed

# The rockspec: luarocks make in a copy of the files it needs, against the
# prefix above. luarocks is not among scripts/install-deps.sh's packages.
rockspec() {
  local src=$work/rocksrc out spec
  spec=$(ls "$TOP"/packaging/redlockc-*.rockspec)
  mkdir -p "$src/packaging" "$src/bindings/swig" "$src/bindings/lua"
  cp "$spec" "$src/packaging/" && cp "$TOP/bindings/swig/redlockc.i" "$src/bindings/swig/" &&
    cp "$TOP/bindings/lua/redlockc.lua" "$src/bindings/lua/" || return 1
  (cd "$src" && env -u LUA_PATH -u LUA_CPATH luarocks --lua-version 5.4 --tree "$work/rocks" make "packaging/$(basename "$spec")" \
    REDLOCKC_DIR="$prefix") >"$work/luarocks.log" 2>&1 || { cat "$work/luarocks.log"; return 1; }
  out=$(env -u LD_LIBRARY_PATH LUA_CPATH="$work/rocks/lib/lua/5.4/?.so" \
    LUA_PATH="$work/rocks/share/lua/5.4/?.lua" lua5.4 "$HERE/smoke.lua" "$REDIS_URI" lua:rock 2>&1)
  echo "rock-installed module: $out"
  [ "$out" = "acquired, owned=true, count=1, released" ]
}
# The source archive the build makes (target lua_source_archive): luarocks
# install of its .src.rock and of its rockspec, each into a tree of its own.
rock_archive() {
  local dir=$BUILD/packaging/lua what out
  rm -rf "$dir"
  cmake --build "$BUILD" --target lua_source_archive >"$work/archive.log" 2>&1 || {
    cat "$work/archive.log"
    return 1
  }
  for what in src.rock rockspec; do
    (cd "$work" && env -u LUA_PATH -u LUA_CPATH luarocks --lua-version 5.4 --tree "$work/tree-$what" \
      install "$(ls "$dir"/redlockc-*."$what")" REDLOCKC_DIR="$prefix") >"$work/luarocks-$what.log" 2>&1 || {
      cat "$work/luarocks-$what.log"
      return 1
    }
    out=$(env -u LD_LIBRARY_PATH LUA_CPATH="$work/tree-$what/lib/lua/5.4/?.so" \
      LUA_PATH="$work/tree-$what/share/lua/5.4/?.lua" lua5.4 "$HERE/smoke.lua" "$REDIS_URI" lua:$what 2>&1)
    echo "installed from the $what: $out"
    [ "$out" = "acquired, owned=true, count=1, released" ] || return 1
  done
}
if command -v luarocks >/dev/null; then
  run "rockspec (luarocks make)" rockspec
  run "source archive (luarocks install)" rock_archive
else
  echo "--- lua: skip rockspec (luarocks make): luarocks is not installed"
fi

((${#failures[@]})) && echo "lua: FAILED: ${failures[*]}"
echo "lua: $parts_passed passed, ${#failures[@]} failed"
((${#failures[@]} == 0))
