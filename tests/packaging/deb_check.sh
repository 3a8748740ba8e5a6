#!/usr/bin/env bash
# Builds the Debian packages (CPack), checks their contents and dependencies,
# installs them into this machine with dpkg -i, builds and runs the
# pkg-config consumer against the installed system copy, and removes the
# packages again (trap), so the machine stays as it was. Needs root.
#   RLC_BUILD_DIR=build bash tests/packaging/deb_check.sh
# The packages are built in $RLC_BUILD_DIR-deb, configured for /usr.
set -uo pipefail
cd "$(dirname "$0")/../.."
TOP=$PWD
HERE=$TOP/tests/packaging
BUILD=${RLC_BUILD_DIR:-$TOP/build}
DEBBUILD=$BUILD-deb
source "$HERE/check.sh"
source "$HERE/redis.sh"
PACKAGES=(libredlockc1 libredlockc-dev redlockc)

if [ "$(id -u)" -ne 0 ]; then
  echo "skip - the deb test installs packages: it needs root"
  exit 0
fi
installed_before=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W "$p" >/dev/null 2>&1 && installed_before+=("$p") # in any state
done
if ((${#installed_before[@]})); then
  # Installing ours over them and removing them after would change the
  # machine; not testing would hide it. Say what to do.
  echo "FAIL - dpkg already knows ${installed_before[*]} on this machine (left alone);"
  echo "       to run this test: dpkg --purge ${installed_before[*]}"
  exit 1
fi

work=$(mktemp -d /tmp/rlc-deb-XXXXXX)
we_installed=0
cleanup() {
  if ((we_installed)); then
    if dpkg_retry --purge "${PACKAGES[@]}" >/dev/null; then
      echo "cleanup: purged ${PACKAGES[*]}"
    else
      echo "cleanup: dpkg --purge FAILED; remove by hand: dpkg --purge ${PACKAGES[*]}" >&2
    fi
  fi
  redis_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM # so that the EXIT trap runs on these too

# dpkg refuses while another dpkg/apt run holds its lock: wait, bounded (60 s).
dpkg_retry() {
  local i
  for i in $(seq 60); do
    if dpkg "$@" >"$work/dpkg.log" 2>&1; then return 0; fi
    grep -q "lock" "$work/dpkg.log" || break
    sleep 1
  done
  cat "$work/dpkg.log"
  return 1
}

echo "--- build the packages in $DEBBUILD"
expect_run "configure for /usr" cmake -S "$TOP" -B "$DEBBUILD" -DCMAKE_INSTALL_PREFIX=/usr \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLC_TESTS=OFF
expect_run "build" cmake --build "$DEBBUILD" -j"$(nproc)"
rm -f "$DEBBUILD"/*.deb
(cd "$DEBBUILD" && expect_run "cpack -G DEB" cpack -G DEB) || true
deb() { ls "$DEBBUILD/$1"_*.deb 2>/dev/null | head -n 1; }
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$DEBBUILD/CMakeCache.txt")
for p in "${PACKAGES[@]}"; do
  [ -n "$(deb "$p")" ] && pass "package $p built" || fail "package $p built" "$DEBBUILD/${p}_*.deb" "none"
done
if [ -z "$(deb libredlockc1)" ] || [ -z "$(deb libredlockc-dev)" ]; then
  check_summary
  exit 1
fi

echo "--- contents and dependencies"
files() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$' | sort | xargs; }
field() { dpkg-deb -f "$1" "$2"; }
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
expect_eq "libredlockc1 holds the runtime library only (and its copyright file)" \
  "/usr/lib/$ma/libredlockc.so.1 /usr/lib/$ma/libredlockc.so.$version /usr/share/doc/libredlockc1/copyright" \
  "$(files "$(deb libredlockc1)")"
expect_match "libredlockc1 depends on libhiredis0.14 (dpkg-shlibdeps)" "libhiredis0\.14" \
  "$(field "$(deb libredlockc1)" Depends)"
expect_match "libredlockc1 depends on libssl3 (dpkg-shlibdeps: TLS of the blocking API)" "libssl3" \
  "$(field "$(deb libredlockc1)" Depends)"
expect_match "libredlockc1 has a shlibs file" "libredlockc 1 libredlockc1" \
  "$(dpkg-deb --info "$(deb libredlockc1)" shlibs 2>&1)"
devfiles=$(files "$(deb libredlockc-dev)")
for f in /usr/include/redlockc.h /usr/lib/$ma/libredlockc.so /usr/lib/$ma/pkgconfig/redlockc.pc \
  /usr/lib/$ma/cmake/redlockc/redlockcConfig.cmake; do
  expect_match "libredlockc-dev holds $f" "(^| )$f( |$)" "$devfiles"
done
expect_no_match "libredlockc-dev does not hold the runtime library" "libredlockc\.so\.1" "$devfiles"
expect_match "libredlockc-dev depends on this libredlockc1" "libredlockc1 \(= [0-9.]+-[0-9]+\)" \
  "$(field "$(deb libredlockc-dev)" Depends)"
expect_eq "redlockc holds the CLI, its man page and its copyright file" \
  "/usr/bin/redlockc /usr/share/doc/redlockc/copyright /usr/share/man/man1/redlockc.1.gz" \
  "$(files "$(deb redlockc)")"
for p in libredlockc1 libredlockc-dev redlockc; do
  expect_match "$p's copyright file is the MIT LICENSE" "MIT License" \
    "$(dpkg-deb --fsys-tarfile "$(deb $p)" | tar -xO ./usr/share/doc/$p/copyright 2>&1)"
done
expect_match "redlockc depends on libredlockc1" "libredlockc1" "$(field "$(deb redlockc)" Depends)"

echo "--- control fields of every package built (the bindings' too)"
for f in "$DEBBUILD"/*.deb; do
  p=$(field "$f" Package)
  expect_eq "$p's Version is the project's" "$version-1" "$(field "$f" Version)"
  expect_match "$p has a Homepage" "^https://[^ ]+$" "$(field "$f" Homepage)"
  expect_no_match "$p's Maintainer is no local placeholder" "@localhost>|@example\.|\.(local|test)>" \
    "$(field "$f" Maintainer)"
  expect_match "$p's synopsis is its own" "^distributed locks on Redis - .+" \
    "$(field "$f" Description | sed -n 1p)"
  # A list separator or an odd number of quotes: a quoted word lost on the way to CPack.
  expect_no_match "$p's Description is intact" ';|^[^"]*("[^"]*"[^"]*)*"[^"]*$' \
    "$(field "$f" Description)"
done

echo "--- dpkg -i, then consumers of the system copy"
debs=()
for p in "${PACKAGES[@]}"; do debs+=("$(deb "$p")"); done
we_installed=1 # from here on the trap removes them, whatever happens
if dpkg_retry -i "${debs[@]}"; then pass "dpkg -i ${PACKAGES[*]}"; else fail "dpkg -i" "exit 0" "failed"; fi
redis_start || fail "redis-server starts" "PONG" "no answer"
flags=$(env -u PKG_CONFIG_PATH pkg-config --cflags --libs redlockc 2>&1)
expect_match "pkg-config finds the installed redlockc.pc" "-lredlockc" "$flags"
# shellcheck disable=SC2086
expect_run "cc app.c \$(pkg-config --cflags --libs redlockc)" \
  cc -Wall -Wextra -Werror -o "$work/app" "$HERE/consumers/app.c" $flags
expect_output "the consumer runs against /usr/lib/$ma/libredlockc.so.1" "acquired, held=1, released" \
  env -u LD_LIBRARY_PATH "$work/app" "$REDIS_URI" consumer-deb
expect_match "it loaded the system copy" "=> (/usr)?/lib/$ma/libredlockc\.so\.1 " \
  "$(env -u LD_LIBRARY_PATH ldd "$work/app" | grep redlockc)"
expect_output "/usr/bin/redlockc runs" "^token=[1-9][0-9]*$" \
  /usr/bin/redlockc --nodes "$REDIS_URI" --options fencing=1 cli-deb -- sh -c 'echo "token=$REDLOCKC_FENCING_TOKEN"'

echo "--- dpkg --purge"
if dpkg_retry --purge "${PACKAGES[@]}"; then
  we_installed=0
  pass "dpkg --purge ${PACKAGES[*]}"
else
  fail "dpkg --purge" "exit 0" "failed"
fi
left=$(ls /usr/lib/"$ma"/libredlockc* /usr/include/redlockc.h /usr/bin/redlockc 2>/dev/null | xargs)
expect_eq "nothing of ours is left on the system" "" "$left"
expect_eq "dpkg knows none of them any more" "" \
  "$(dpkg-query -W -f='${Package} ${Status}\n' "${PACKAGES[@]}" 2>/dev/null)"

check_summary
