#!/usr/bin/env bash
# Installs the build into a temporary prefix (cmake --install --prefix) and
# builds three consumers there, outside the tree, against a real redis-server:
#   1. cc app.c $(pkg-config --cflags --libs redlockc)
#   2. find_package(redlockc 1 REQUIRED) + redlockc::redlockc
#   3. dlopen("libredlockc.so.1") + dlvsym, without header or -lredlockc
# and runs the installed CLI.
#   RLC_BUILD_DIR=build bash tests/packaging/install_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
TOP=$PWD
HERE=$TOP/tests/packaging
BUILD=${RLC_BUILD_DIR:-$TOP/build}
source "$HERE/check.sh"
source "$HERE/redis.sh"

work=$(mktemp -d /tmp/rlc-install-XXXXXX)
prefix=$work/prefix
cleanup() {
  redis_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM # so that the EXIT trap runs on these too

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
libdir=$prefix/$(cache CMAKE_INSTALL_LIBDIR)

echo "--- cmake --install $BUILD --prefix $prefix"
expect_run "cmake --install into a temporary prefix" cmake --install "$BUILD" --prefix "$prefix" >/dev/null || {
  check_summary
  exit 1
}

echo "--- installed files"
real=$(cd "$libdir" && ls libredlockc.so.1.* 2>/dev/null | head -n 1)
expect_file "the library's real file" "$libdir/${real:-libredlockc.so.1.x.y}"
expect_link "SONAME link libredlockc.so.1" "$libdir/libredlockc.so.1" "$real"
expect_link "dev link libredlockc.so" "$libdir/libredlockc.so" "libredlockc.so.1"
expect_eq "SONAME in the library" "libredlockc.so.1" \
  "$(readelf -d "$libdir/libredlockc.so.1" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')"
expect_file "header" "$prefix/include/redlockc.h"
expect_file "pkg-config file" "$libdir/pkgconfig/redlockc.pc"
for f in redlockcConfig.cmake redlockcConfigVersion.cmake redlockcTargets.cmake; do
  expect_file "CMake package: $f" "$libdir/cmake/redlockc/$f"
done
expect_file "CLI" "$prefix/bin/redlockc"
expect_file "man page" "$prefix/share/man/man1/redlockc.1.gz"
expect_match "the man page is redlockc(1)" '^\.TH REDLOCKC 1' \
  "$(gzip -dc "$prefix/share/man/man1/redlockc.1.gz" 2>&1 | grep '^\.TH')"

# The bindings install where they were built (their own install rules, in
# the install components "python" and "lua").
for b in python lua; do
  B=${b^^}
  if [ "$(cache RLC_$B)" != ON ] || [ ! -f "$TOP/bindings/$b/CMakeLists.txt" ]; then
    echo "skip - $b module: not built in $BUILD"
    continue
  fi
  found=$(find "$prefix" -path "*$b*" -name '*redlockc*' | sed "s|^$prefix/||" | sort | head -n 5)
  if [ -n "$found" ]; then
    pass "$b module installed: $(echo $found)"
  else
    fail "$b module installed" "files named *redlockc* under a $b directory of $prefix" "none"
  fi
done

echo "--- a redis-server for the consumers"
redis_start || {
  fail "redis-server starts" "PONG" "no answer"
  check_summary
  exit 1
}
export PKG_CONFIG_PATH=$libdir/pkgconfig
export LD_LIBRARY_PATH=$libdir # consumers 1 and 3 run from a plain prefix

echo "--- consumer 1: pkg-config"
flags=$(pkg-config --cflags --libs redlockc 2>&1)
expect_match "pkg-config --libs names the prefix's library" "-L$libdir -lredlockc" "$flags"
expect_no_match "pkg-config --libs does not link hiredis (private to the .so)" "-lhiredis" "$flags"
expect_match "pkg-config --static --libs adds hiredis" "-lhiredis" \
  "$(pkg-config --static --libs redlockc 2>&1)"
expect_eq "pkg-config --modversion" "$(cache CMAKE_PROJECT_VERSION)" "$(pkg-config --modversion redlockc 2>&1)"
# shellcheck disable=SC2086 # word splitting of the flags is the point
expect_run "cc app.c \$(pkg-config --cflags --libs redlockc)" \
  cc -Wall -Wextra -Werror -o "$work/app-pc" "$HERE/consumers/app.c" $flags
headers=$(cc -H -fsyntax-only $(pkg-config --cflags redlockc) "$HERE/consumers/app.c" 2>&1)
expect_no_match "compiling against redlockc.h reads no hiredis header" "hiredis" "$headers"
expect_output "the pkg-config consumer takes and releases a lock" "acquired, held=1, released" \
  "$work/app-pc" "$REDIS_URI" consumer-pc
expect_eq "its lock is gone from Redis" "0" "$(redis_cli exists consumer-pc)"
expect_eq "the consumer needs libredlockc.so.1 and libc only (hiredis is private)" \
  "libc.so.6 libredlockc.so.1" \
  "$(readelf -d "$work/app-pc" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | xargs)"

echo "--- consumer 2: find_package(redlockc 1 REQUIRED)"
unset LD_LIBRARY_PATH # CMake gives the consumer a RUNPATH to the imported library
expect_run "cmake configure with CMAKE_PREFIX_PATH=prefix" \
  cmake -S "$HERE/consumers/cmake" -B "$work/cmake-app" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror"
expect_run "cmake build" cmake --build "$work/cmake-app"
expect_output "the CMake consumer takes and releases a lock" "acquired, held=1, released" \
  "$work/cmake-app/app" "$REDIS_URI" consumer-cmake
expect_eq "its lock is gone from Redis" "0" "$(redis_cli exists consumer-cmake)"
if cmake -S "$HERE/consumers/cmake" -B "$work/cmake-app2" -DCMAKE_PREFIX_PATH="$prefix" \
  -DREDLOCKC_WANT=2 >"$work/want2.log" 2>&1; then
  fail "find_package(redlockc 2) is refused (SameMajorVersion)" "configure fails" "it succeeded"
else
  expect_match "find_package(redlockc 2) is refused (SameMajorVersion)" \
    'compatible with requested version "2"' "$(cat "$work/want2.log")"
fi

echo "--- consumer 3: dlopen(\"libredlockc.so.1\")"
expect_run "cc dlopen.c (no header, no -lredlockc)" \
  cc -Wall -Wextra -Werror -o "$work/app-dl" "$HERE/consumers/dlopen.c" -ldl
expect_output "the dlopen consumer resolves REDLOCKC_1.0 functions and locks" \
  "acquired, held=1, released" env LD_LIBRARY_PATH="$libdir" "$work/app-dl" "$REDIS_URI" consumer-dlopen
expect_eq "its lock is gone from Redis" "0" "$(redis_cli exists consumer-dlopen)"

echo "--- the installed CLI (RUNPATH \$ORIGIN/../lib: no LD_LIBRARY_PATH)"
expect_match "redlockc --version" "^redlockc [0-9.]+ \(libredlockc [0-9.]+\)$" \
  "$("$prefix/bin/redlockc" --version 2>&1)"
out=$("$prefix/bin/redlockc" --nodes "$REDIS_URI" --options fencing=1 cli-installed -- sh -c 'echo "token=$REDLOCKC_FENCING_TOKEN"; exit 3' 2>&1)
rc=$?
# The first token of a name is the node's clock in microseconds (a counter
# that survives a restart without persistence), so any positive one.
expect_match "redlockc runs CMD under the lock and passes on its status" "^token=[1-9][0-9]* / 3$" \
  "$out / $rc"

check_summary
