#!/usr/bin/env bash
# Records the ABI of the library as built now as the new baseline
# (packaging/abi/libredlockc.so.1.abi and constants.txt), which
# tests/packaging/abi_check.sh compares every later build with.
#
# Run it deliberately, and commit its output in the same change as:
#   - a new function, in a new version node of packaging/redlockc.map
#     (REDLOCKC_1.1 { global: rlc_new; } REDLOCKC_1.0;): compatible growth;
#   - or, never within SONAME libredlockc.so.1, an incompatible change: that
#     needs SOVERSION 2, a new REDLOCKC_2.0 node and a new major version.
# The check passes without it for additions; it fails for removals and
# changed signatures until the baseline is updated here.
#
#   bash packaging/update-abi-baseline.sh [BUILD_DIR]   (default: build-abi)
set -euo pipefail
source "$(dirname "$0")/abi/abi.sh"
BUILD=${1:-$ABI_TOP/build-abi}

# Always the same kind of build (RelWithDebInfo: optimised, with DWARF).
cmake -S "$ABI_TOP" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLC_TESTS=OFF \
  -DRLC_CLI=OFF >/dev/null
cmake --build "$BUILD" --target redlockc -j"$(nproc)" >/dev/null
abi_dump "$BUILD/c/libredlockc.so.1" "$ABI_XML"
abi_constants "$ABI_CONSTANTS"
echo "baseline written: ${ABI_XML#$ABI_TOP/}, ${ABI_CONSTANTS#$ABI_TOP/}"
echo "exported symbols:"
abi_symbols "$ABI_XML" | sed 's/^/  /'
if git -C "$ABI_TOP" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ABI_TOP" --no-pager diff --stat -- packaging/abi
fi
