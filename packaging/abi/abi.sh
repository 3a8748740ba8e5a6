# abi.sh - how the ABI of libredlockc.so.1 is described; sourced by
# tests/packaging/abi_check.sh (compare) and packaging/update-abi-baseline.sh
# (record). One place, so the baseline and the check can never be made with
# different settings.
#
# The description has two parts, both committed in packaging/abi/:
#   libredlockc.so.1.abi  abidw's XML: every exported function, its symbol
#                         version and its signature. Only what redlockc.h
#                         shows is kept (--headers-dir, --drop-private-types,
#                         --exported-interfaces-only): struct rlc_client and
#                         rlc_lock stay opaque declarations, so their insides
#                         may change freely. No source locations, so moving
#                         code does not change it.
#   constants.txt         "NAME VALUE" for every RLC_* enum constant of the
#                         header. The status codes are ABI (callers compare
#                         numbers), but no function's signature names their
#                         anonymous enum, so abidw does not see them.

ABI_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ABI_TOP=$(cd "$ABI_DIR/../.." && pwd)
ABI_XML=$ABI_DIR/libredlockc.so.1.abi
ABI_CONSTANTS=$ABI_DIR/constants.txt
# Reported changes that are compatible (a reserved member put to use).
ABI_SUPPRESSIONS=$ABI_DIR/suppressions.ini
# Version nodes that shipped in a release, one a line: frozen, no symbol may
# join them. A node in the baseline but not listed here (REDLOCKC_1.1 while
# 1.1 is being made) still takes new symbols.
ABI_SHIPPED=$ABI_DIR/shipped-nodes.txt
ABI_HEADERS=$ABI_TOP/c/include

# abi_require_debug_info LIB: abidw reads DWARF; a build without -g has none.
abi_require_debug_info() {
  if ! grep -q '\.debug_info' <<<"$(readelf -S "$1")"; then
    echo "abi: $1 has no debug info; build with CMAKE_BUILD_TYPE RelWithDebInfo or Debug" >&2
    return 1
  fi
}

# abi_dump LIB OUT: the XML description of LIB's exported interface.
abi_dump() {
  abi_require_debug_info "$1" || return 1
  abidw --headers-dir "$ABI_HEADERS" --drop-private-types --exported-interfaces-only \
    --no-show-locs --no-corpus-path --no-comp-dir-path --no-elf-needed \
    --type-id-style hash --out-file "$2" "$1"
}

# abi_constants OUT: "NAME VALUE" for each RLC_* enum constant of the header,
# as a C compiler evaluates it (not as text: "RLC_E_X = -1" could be written
# many ways).
abi_constants() {
  local tmp names
  tmp=$(mktemp -d)
  names=$(grep -oE '^[[:space:]]*RLC_[A-Z0-9_]+[[:space:]]*=' "$ABI_HEADERS/redlockc.h" |
          tr -d ' =\t' | sort -u)
  {
    echo '#include <stdio.h>'
    echo '#include "redlockc.h"'
    echo 'int main(void) {'
    for n in $names; do echo "  printf(\"%s %d\\n\", \"$n\", (int)$n);"; done
    echo '  return 0; }'
  } >"$tmp/c.c"
  cc -I"$ABI_HEADERS" -o "$tmp/c" "$tmp/c.c" && "$tmp/c" | sort >"$1"
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

# abi_symbols FILE.abi: "name version" of each function symbol it records.
abi_symbols() {
  sed -n "s/.*<elf-symbol name='\([^']*\)' version='\([^']*\)'.*/\1 \2/p" "$1" | sort
}
