#!/usr/bin/env bash
# The Node package as an npm user gets it (issue 35, point 2):
#   1. `npm pack` of bindings/node makes a tarball with the native part
#      prebuilt for linux-x64: libredlockc compiled into the helper, and
#      hiredis, libssl and libcrypto beside it (RPATH $ORIGIN). ldd of the
#      unpacked helper finds nothing outside its folder but glibc.
#   2. In a fresh project with a HOME and npm cache of its own, no C compiler
#      and no pkg-config on PATH and no PKG_CONFIG_PATH, `npm install
#      <tarball>` works (koffi from the npm registry) and the README's
#      examples, cut out of it (readme_blocks.py), run as written against a
#      real redis-server.
#   3. TypeScript (from npm, in a directory of its own): `tsc --strict
#      --noEmit` passes on the README's examples, against the installed
#      package's declarations, and fails on an option name that does not
#      exist (the declarations are not `any`).
#   bash tests/packaging/node_tarball.sh      RLC_BUILD_DIR: a configured build
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
export RLC_BUILD_DIR=${RLC_BUILD_DIR:-$TOP/build}
source "$HERE/redis.sh"

W=$(mktemp -d /tmp/rlc-node-tarball-XXXXXX)
cleanup() {
  redis_stop
  rm -rf "$W"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
block() { /usr/bin/python3 "$HERE/readme_blocks.py" "$TOP/bindings/node/README.md" "$1"; }
# Every step bounded in time; its output shown only when it fails.
step() { # WHAT CMD...
  local what=$1 log=$W/step.log
  shift
  timeout -k 5 600 "$@" >"$log" 2>&1 && return 0
  echo "FAILED: $what: $*" >&2
  tail -40 "$log" >&2
  return 1
}
expect_out() { # WHAT PATTERN CMD...
  local what=$1 pattern=$2 out
  shift 2
  out=$(timeout -k 5 120 "$@" 2>&1) || fail "$what exited non-zero: $out"
  grep -q -- "$pattern" <<<"$out" || fail "$what: no '$pattern' in its output: $out"
  echo "  $what: ok"
}
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false \
  npm_config_loglevel=error

# ---- 1. npm pack, from a copy of the folder as git has it (no build/, no
# node_modules/, nothing left in the checkout) ------------------------------
src=$W/src
mkdir -p "$src"
(cd "$TOP/bindings/node" && git ls-files -z --cached --others --exclude-standard . |
  xargs -0 cp --parents -t "$src") || fail "copying bindings/node"
step "npm pack" env npm_config_cache="$W/pack-cache" npm pack --pack-destination "$W" "$src" || exit 1
tgz=$(ls "$W"/redlockc-*.tgz 2>/dev/null) && [ -f "$tgz" ] || fail "npm pack made no tarball: $(cat "$W/step.log")"
[ ! -e "$src/prebuilds" ] || fail "npm pack's postpack left $src/prebuilds behind"
echo "  tarball: ${tgz##*/} ($(du -k "$tgz" | cut -f1) KB)"

mkdir -p "$W/unpacked" && tar -xzf "$tgz" -C "$W/unpacked" || fail "unpacking $tgz"
pre=$W/unpacked/package/prebuilds/linux-x64
[ -f "$pre/librlcnode.so" ] || fail "no prebuilds/linux-x64/librlcnode.so in the tarball: $(tar -tzf "$tgz")"
# ldd: every library outside glibc resolves inside the folder.
ldd "$pre/librlcnode.so" >"$W/ldd.txt" 2>&1 || fail "ldd: $(cat "$W/ldd.txt")"
outside=$(awk -v dir="$pre/" '
  $2 == "=>" && $3 == "not" { print $1 " not found"; next }
  $2 == "=>" && index($3, dir) != 1 && $1 !~ /^(libc|libm|libpthread|libdl|librt|ld-linux[-a-z0-9_.]*)\.so/ { print $1 " => " $3 }
' "$W/ldd.txt")
[ -z "$outside" ] || fail "the prebuilt needs libraries from the system: $outside"
grep -q "libhiredis.so.* => $pre/" "$W/ldd.txt" && grep -q "libssl.so.* => $pre/" "$W/ldd.txt" ||
  fail "hiredis and libssl are not bundled: $(cat "$W/ldd.txt")"
echo "  ldd: only glibc from the system"

# ---- 2. a user's project: no compiler, no pkg-config, a HOME of its own ---
bin=$W/bin
mkdir -p "$bin" "$W/home"
for tool in node npm npx sh bash env cat ls mkdir rm cp mv ln chmod uname tar gzip sed grep dirname basename; do
  p=$(command -v "$tool") || fail "$tool is not installed"
  ln -s "$p" "$bin/$tool"
done
redis_start || exit 1
export REDLOCKC_NODES=$REDIS_URI
# What the user's shell has: this PATH, this HOME, nothing else.
as_user=(env -i HOME="$W/home" PATH="$bin" TMPDIR="$W" LANG=C.UTF-8 npm_config_cache="$W/home/.npm"
  npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false
  REDLOCKC_NODES="$REDLOCKC_NODES")
user() { "${as_user[@]}" "$@"; }
for tool in cc gcc clang c99 tcc pkg-config; do
  ! user sh -c "command -v $tool" >/dev/null || fail "$tool is on the user's PATH"
done
app=$W/app
mkdir -p "$app"
(cd "$app" && user npm init -y >/dev/null) || fail "npm init"
(cd "$app" && step "npm install <tarball> (no compiler, no PKG_CONFIG_PATH)" "${as_user[@]}" npm install "$tgz") || exit 1
[ ! -e "$app/node_modules/redlockc/build/librlcnode.so" ] || fail "the install compiled the helper instead of using the prebuilt"
# Where no prebuilt fits (here: refused by REDLOCKC_BUILD_FROM_SOURCE=1), the
# install builds from source, and without a compiler it says what it needs.
mkdir -p "$W/app-src" && (cd "$W/app-src" && user npm init -y >/dev/null) || fail "npm init"
if out=$(cd "$W/app-src" && timeout -k 5 300 "${as_user[@]}" REDLOCKC_BUILD_FROM_SOURCE=1 npm install "$tgz" 2>&1); then
  fail "npm install with REDLOCKC_BUILD_FROM_SOURCE=1 and no compiler succeeded: $out"
fi
grep -q "building it from source needs a C compiler: 'cc' was not found" <<<"$out" ||
  fail "no word of the missing compiler in: $out"
echo "  no prebuilt and no compiler: the install says what it needs"

block node-cjs >"$app/main.js" || exit 1
block node-esm >"$app/main.mjs" || exit 1
(cd "$app" && expect_out "README example (CommonJS)" "fencing token" "${as_user[@]}" node main.js) || exit 1
(cd "$app" && expect_out "README example (ES module)" "held; valid for" "${as_user[@]}" node main.mjs) || exit 1
# The one that ran is the prebuilt, with the hiredis and OpenSSL beside it.
(cd "$app" && user node -e '
require("redlockc");
const maps = require("fs").readFileSync("/proc/self/maps", "utf8");
const ours = (l) => maps.split("\n").filter((x) => x.includes(l)).map((x) => x.split(/\s+/).pop());
for (const lib of ["librlcnode.so", "libhiredis.so", "libredlockc"]) {
  const at = [...new Set(ours(lib))];
  const want = lib === "libredlockc" ? [] : at.filter((p) => p.includes("/node_modules/redlockc/prebuilds/linux-x64/"));
  if (at.length !== want.length) { console.error(`${lib} loaded from ${at}`); process.exit(1); }
}') || fail "the process did not load the prebuilt helper and its own hiredis"
echo "  loaded: the prebuilt helper and the hiredis beside it"

# ---- 3. TypeScript: the README's examples under tsc --strict --------------
ts=$W/ts # typescript and @types/node from npm, in a directory of their own
mkdir -p "$ts" && (cd "$ts" && user npm init -y >/dev/null) || fail "npm init"
(cd "$ts" && step "npm install typescript @types/node" "${as_user[@]}" npm install typescript@5 @types/node@20) || exit 1
# The CommonJS example is checked as JavaScript (checkJs): in a .cts file
# require() would be `any`, in a .cjs file tsc types it from index.d.ts.
block node-cjs >"$app/main.cjs" && block node-esm >"$app/main-esm.mts" && block node-ts >"$app/main-ts.mts" || exit 1
cat >"$app/tsconfig.json" <<JSON
{
  "compilerOptions": {
    "strict": true, "noEmit": true, "skipLibCheck": false, "allowJs": true, "checkJs": true,
    "module": "nodenext", "moduleResolution": "nodenext", "target": "es2022",
    "types": ["node"], "typeRoots": ["$ts/node_modules/@types"]
  },
  "files": ["main.cjs", "main-esm.mts", "main-ts.mts"]
}
JSON
(cd "$app" && step "tsc --strict --noEmit on the README's examples" "${as_user[@]}" node "$ts/node_modules/typescript/bin/tsc" -p tsconfig.json) || exit 1
echo "  tsc --strict: the README's examples pass"
# The TypeScript example, compiled, runs too.
(cd "$app" && step "tsc (emit) the TypeScript example" "${as_user[@]}" node "$ts/node_modules/typescript/bin/tsc" \
  -p tsconfig.json --noEmit false --outDir out) || exit 1
(cd "$app" && expect_out "README example (TypeScript, compiled)" "with the lock: 42" "${as_user[@]}" node out/main-ts.mjs) || exit 1
# The declarations are not `any`: a misspelt option fails to compile.
cat >"$app/wrong.mts" <<'TS'
import { Client } from 'redlockc';
const client = new Client('redis://127.0.0.1:6379', { watchdogTimeout: 10000 });
await client.lock('x').acquire({ timeout: 500 });
TS
sed -i 's/"main-ts.mts"\]/"main-ts.mts", "wrong.mts"]/' "$app/tsconfig.json"
out=$(cd "$app" && "${as_user[@]}" node "$ts/node_modules/typescript/bin/tsc" -p tsconfig.json 2>&1) &&
  fail "tsc passed a misspelt option"
grep -q "wrong.mts(2,.*'watchdogTimeout' does not exist" <<<"$out" && grep -q "wrong.mts(3,.*'timeout' does not exist" <<<"$out" ||
  fail "tsc did not name the misspelt options: $out"
echo "  tsc --strict: misspelt options are errors"
