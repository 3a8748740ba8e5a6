#!/usr/bin/env bash
# ABI guard: compares libredlockc.so.1 as built now with the committed
# baseline (packaging/abi/, see abi.sh there) and fails on an incompatible
# change: a removed function, a changed signature, a changed status code,
# a symbol outside rlc_* or without a version, a new symbol put into a
# version node that already shipped, a function of redlockc.h not exported.
# Additions are compatible: they pass with a note.
#
#   bash tests/packaging/abi_check.sh [LIB]
# LIB defaults to $RLC_BUILD_DIR/c/libredlockc.so.1 (built here first).
# After a deliberate change: bash packaging/update-abi-baseline.sh, commit.
set -uo pipefail
cd "$(dirname "$0")/../.."
source packaging/abi/abi.sh
BUILD=${RLC_BUILD_DIR:-$PWD/build}

lib=${1:-}
if [ -z "$lib" ]; then
  cmake --build "$BUILD" --target redlockc -j"$(nproc)" >/dev/null || exit 1
  lib=$BUILD/c/libredlockc.so.1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "ABI FAIL: $*"; failures=$((failures + 1)); }

# 1. Only rlc_* symbols, each with a version (nm -D: "addr type name").
echo "--- exported symbols (nm -D --defined-only)"
nm -D --defined-only "$lib" >"$tmp/nm" || { echo "nm failed on $lib"; exit 1; }
while read -r _ type sym; do
  if [ "$type" = A ]; then
    [[ $sym =~ ^REDLOCKC_[0-9]+\.[0-9]+$ ]] || fail "unexpected version node '$sym'"
  elif [[ ! $sym =~ ^rlc_[a-z0-9_]+@@REDLOCKC_[0-9]+\.[0-9]+$ ]]; then
    fail "symbol '$sym' (type $type): expected rlc_*@@REDLOCKC_<n>.<m>"
  fi
done <"$tmp/nm"
echo "$(grep -c ' rlc_' "$tmp/nm") rlc_* symbols, nodes: $(awk '$2 == "A" {print $3}' "$tmp/nm" | xargs)"

# 2. Functions and signatures: abidiff of the baseline and the current XML.
echo "--- abidiff against ${ABI_XML#$PWD/}"
abi_dump "$lib" "$tmp/current.abi" || exit 1
abidiff --suppressions "$ABI_SUPPRESSIONS" "$ABI_XML" "$tmp/current.abi" >"$tmp/report" 2>&1
rc=$?
# abidiff's status is a bit set: 1 error, 2 usage, 4 change, 8 incompatible.
if ((rc & 3)); then
  cat "$tmp/report"
  fail "abidiff itself failed (status $rc)"
elif ((rc & 8)); then
  cat "$tmp/report"
  fail "incompatible change (abidiff status $rc)"
elif ((rc & 4)); then
  cat "$tmp/report"
  # abidiff counts a changed parameter or return type as a change, not as
  # incompatible; for callers of a C function it is.
  summary=$(grep -E '^(Functions|Variables) changes summary' "$tmp/report")
  removed=$(echo "$summary" | grep -oE '[0-9]+ Removed' | awk '{s += $1} END {print s + 0}')
  changed=$(echo "$summary" | grep -oE '[0-9]+ Changed' | awk '{s += $1} END {print s + 0}')
  if ((removed + changed > 0)); then
    fail "$removed removed and $changed changed functions/variables: incompatible"
  else
    echo "compatible growth; record it with packaging/update-abi-baseline.sh when it ships"
  fi
else
  echo "no change"
fi

# 3. Symbol versions: a shipped symbol keeps its node; a new symbol goes into
#    a node that did not ship (REDLOCKC_1.1 ...), never into an old one.
echo "--- symbol versions"
abi_symbols "$ABI_XML" >"$tmp/old.sym"
abi_symbols "$tmp/current.abi" >"$tmp/new.sym"
if [ -f "$ABI_SHIPPED" ]; then
  old_nodes=$(grep -E '^REDLOCKC_' "$ABI_SHIPPED" | sort -u)
else
  old_nodes=$(awk '{print $2}' "$tmp/old.sym" | sort -u)
fi
while read -r name ver; do
  was=$(awk -v n="$name" '$1 == n {print $2}' "$tmp/old.sym")
  if [ -n "$was" ] && [ "$was" != "$ver" ]; then
    fail "$name moved from $was to $ver"
  elif [ -z "$was" ] && grep -qx "$ver" <<<"$old_nodes"; then
    fail "new symbol $name is in $ver, which already shipped: give it a new node"
  elif [ -z "$was" ]; then
    echo "new: $name@@$ver"
  fi
done <"$tmp/new.sym"
# A shipped node keeps exactly its symbols (REDLOCKC_1.0 stays as released);
# a node not shipped yet may gain symbols. Each node is shown.
echo "$(wc -l <"$tmp/new.sym") versioned functions checked; frozen nodes: $(echo $old_nodes)"
for node in $(awk '{print $2}' "$tmp/old.sym" "$tmp/new.sym" | sort -uV); do
  old=$(awk -v v="$node" '$2 == v {print $1}' "$tmp/old.sym" | xargs)
  new=$(awk -v v="$node" '$2 == v {print $1}' "$tmp/new.sym" | xargs)
  count=$(wc -w <<<"$new")
  if grep -qx "$node" <<<"$(echo $old_nodes | tr ' ' '
')"; then
    [ "$old" = "$new" ] || fail "the symbols of shipped node $node changed: baseline [$old], now [$new]"
    echo "$node: unchanged, $count functions"
  elif [ -z "$old" ]; then
    echo "$node: added, $count functions: $new"
  else
    echo "$node: added (not shipped yet), $count functions: $new"
  fi
done

# 4. Status codes and other constants of the header.
echo "--- header constants against ${ABI_CONSTANTS#$PWD/}"
abi_constants "$tmp/constants" || exit 1
while read -r name value; do
  now=$(awk -v n="$name" '$1 == n {print $2}' "$tmp/constants")
  if [ -z "$now" ]; then
    fail "constant $name was removed (expected $value)"
  elif [ "$now" != "$value" ]; then
    fail "constant $name changed: expected $value, seen $now"
  fi
done <"$ABI_CONSTANTS"
while read -r name value; do
  grep -q "^$name " "$ABI_CONSTANTS" || echo "new constant: $name = $value"
done <"$tmp/constants"
echo "$(wc -l <"$ABI_CONSTANTS") constants checked"

# 5. Every function the header declares is exported (a function left out of
#    packaging/redlockc.map would be a link error for callers), and nothing
#    else: the header and the library name the same rlc_* functions.
echo "--- the header's functions against the library's"
grep -oE 'RLC_API [^(]*[ *](rlc_[a-z0-9_]+)\(' "$ABI_HEADERS/redlockc.h" |
  sed -E 's/.*(rlc_[a-z0-9_]+)\($/\1/' | sort -u >"$tmp/header.fn"
awk '{print $1}' "$tmp/new.sym" | sort -u >"$tmp/lib.fn"
if ! diff "$tmp/header.fn" "$tmp/lib.fn" >"$tmp/fn.diff"; then
  sed 's/^/    /' "$tmp/fn.diff"
  fail "the header's functions (<) and the library's (>) differ"
fi
echo "$(wc -l <"$tmp/header.fn") functions in redlockc.h, all exported;" \
  "REDLOCKC_1.0: $(awk '$2 == "REDLOCKC_1.0"' "$tmp/new.sym" | wc -l)," \
  "REDLOCKC_1.1: $(awk '$2 == "REDLOCKC_1.1"' "$tmp/new.sym" | wc -l)"

if ((failures)); then
  echo "ABI check FAILED ($failures problems). If the change is deliberate (a new"
  echo "major version), update the baseline: bash packaging/update-abi-baseline.sh"
  exit 1
fi
echo "ABI check passed"
