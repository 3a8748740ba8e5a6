#!/usr/bin/env bash
# The Lua rock's source archive, from the working tree:
#   bash scripts/lua_source_archive.sh OUTDIR
# writes into OUTDIR
#   redlockc-<version>.tar.gz        what the rock builds (bindings/swig,
#                                    bindings/lua, the rockspec, LICENSE), under
#                                    redlockc-<version>/
#   redlockc-<version>-<rev>.rockspec  packaging/'s rockspec, its source.url
#                                    the archive's file:// URL
#   redlockc-<version>-<rev>.src.rock  `luarocks pack` of the two (when luarocks
#                                    is installed): one file that
#                                    `luarocks install` builds anywhere
# The version is the rockspec's, which tests/packaging/metadata_check.py keeps
# equal to CMakeLists.txt's project() VERSION. CMake runs this as the target
# lua_source_archive (bindings/lua/CMakeLists.txt).
set -euo pipefail
(($# == 1)) || {
  echo "usage: $0 OUTDIR" >&2
  exit 2
}
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

spec=$(ls "$top"/packaging/redlockc-*.rockspec)
name=$(basename "$spec" .rockspec) # redlockc-1.1.0-1
base=${name%-*}                    # redlockc-1.1.0
grep -q "url = \"$base.tar.gz\"" "$spec" || {
  echo "$spec: source.url is not \"$base.tar.gz\"" >&2
  exit 1
}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$base/packaging" "$stage/$base/bindings"
cp -r "$top/bindings/swig" "$top/bindings/lua" "$stage/$base/bindings/"
rm -f "$stage/$base/bindings/lua/CMakeLists.txt" # the CMake build's, not the rock's
cp "$spec" "$stage/$base/packaging/"
cp "$top/LICENSE" "$stage/$base/"
# Sorted names, fixed owner and times: the same tree gives the same archive.
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -cf - "$base" | gzip -n >"$out/$base.tar.gz"
# The copy names the archive by its absolute file:// URL: luarocks resolves a
# relative one in the directory it runs in, and `luarocks pack` runs in a
# temporary one.
sed "s|url = \"$base.tar.gz\"|url = \"file://$out/$base.tar.gz\"|" "$spec" >"$out/$name.rockspec"
echo "$out/$base.tar.gz"

if command -v luarocks >/dev/null; then
  # luarocks is a Lua program: a LUA_PATH for some other tree would break it.
  (cd "$out" && rm -f "$name.src.rock" &&
    env -u LUA_PATH -u LUA_CPATH luarocks --lua-version 5.4 pack "$name.rockspec" >/dev/null)
  [ -f "$out/$name.src.rock" ] || {
    echo "luarocks pack made no $name.src.rock" >&2
    exit 1
  }
  echo "$out/$name.src.rock"
fi
