#!/usr/bin/env bash
# Each binding installed the way its README says, in a fresh prefix and fresh
# homes (a new venv, npm cache and project, GOPATH/GOCACHE and module, gem
# home, luarocks tree), then the README's own example run against a real
# redis-server. The examples are cut out of the READMEs by their
# `<!-- example: NAME -->` markers (readme_blocks.py), so the docs cannot
# drift from what works.
#   bash tests/packaging/readme_examples.sh [python node go ruby lua ...]
# RLC_BUILD_DIR: a configured build of this tree (default build/).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=${RLC_BUILD_DIR:-$TOP/build}
# The project's version (CMakeLists.txt), which every package is named by.
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
PARTS=(python python-wheel python-cmake node-tarball node-folder go ruby lua)
if (($#)); then PARTS=("$@"); fi
source "$HERE/redis.sh"

W=$(mktemp -d /tmp/rlc-readme-XXXXXX)
cleanup() {
  redis_stop
  rm -rf "$W"
}
trap cleanup EXIT
block() { /usr/bin/python3 "$HERE/readme_blocks.py" "$TOP/$1" "$2"; }
# Every step bounded in time; output shown only when it fails.
step() { # WHAT CMD...
  local what=$1 log=$W/step.log
  shift
  if timeout -k 5 600 "$@" >"$log" 2>&1; then
    return 0
  fi
  echo "FAILED: $what: $*" >&2
  tail -40 "$log" >&2
  return 1
}
# The example's output must show it ran to its end.
expect_out() { # WHAT PATTERN CMD...
  local what=$1 pattern=$2 out
  shift 2
  if ! out=$(timeout -k 5 120 "$@" 2>&1); then
    echo "FAILED: $what exited non-zero:" >&2
    echo "$out" >&2
    return 1
  fi
  if ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAILED: $what: no '$pattern' in its output:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "  $what: ok"
}

cmake --build "$BUILD" -j"$(nproc)" >/dev/null || exit 1
step "cmake --install" cmake --install "$BUILD" --prefix "$W/prefix" || exit 1
PREFIX=$W/prefix
LIBDIR=$(dirname "$(find "$PREFIX" -path '*/pkgconfig/redlockc.pc' -print -quit)")
LIBDIR=${LIBDIR%/pkgconfig}
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
redis_start || exit 1
export REDLOCKC_NODES=$REDIS_URI
# No package index for Python, ever (PyPI is not reachable; nothing may be
# fetched behind our back from a local wheel directory either).
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PYTHONPATH

part_python() { # pip install ./bindings/python into a new venv, against the prefix's library
  /usr/bin/python3 -m venv "$W/venv" &&
    step "pip install" "$W/venv/bin/pip" install --no-build-isolation "$TOP/bindings/python" &&
    block bindings/python/README.md python >"$W/example.py" &&
    (cd "$W" && expect_out "python example (pip, pkg-config)" "fencing token" \
      "$W/venv/bin/python" example.py) &&
    block bindings/python/README.md asyncio >"$W/example_asyncio.py" &&
    (cd "$W" && expect_out "python asyncio example (pip)" "fencing token" \
      "$W/venv/bin/python" example_asyncio.py) &&
    (cd "$W" && "$W/venv/bin/python" -c 'import sys, redlockc, redlockc._redlockc_core
maps = open("/proc/self/maps").read()
lib = [l.split()[-1] for l in maps.splitlines() if "libredlockc" in l]
sys.exit(0 if lib and all(p.startswith(sys.argv[1]) for p in lib) else f"libredlockc from {lib}, not {sys.argv[1]}")' "$LIBDIR/libredlockc.so")
}

part_python-wheel() { # pip wheel with the library compiled in, installed into another venv
  /usr/bin/python3 -m venv "$W/venv2" &&
    step "pip wheel" env REDLOCKC_LINK=bundle "$W/venv2/bin/pip" wheel --no-build-isolation \
      -w "$W/wheels" "$TOP/bindings/python" &&
    step "pip install wheel" "$W/venv2/bin/pip" install "$W"/wheels/redlockc-"$VERSION"-*.whl &&
    block bindings/python/README.md python >"$W/example.py" &&
    (cd "$W" && expect_out "python example (wheel, bundled library)" "fencing token" \
      env -u PKG_CONFIG_PATH "$W/venv2/bin/python" example.py)
}

part_python-cmake() { # cmake --install --component python into a venv
  /usr/bin/python3 -m venv "$W/venv3" &&
    step "configure for the venv" cmake -S "$TOP" -B "$W/build-venv" -DRLC_TESTS=OFF \
      -DRLC_CLI=OFF -DRLC_LUA=OFF -DRLC_PYTHON=ON -DPython3_EXECUTABLE="$W/venv3/bin/python" &&
    step "build" cmake --build "$W/build-venv" -j"$(nproc)" &&
    step "install python" cmake --install "$W/build-venv" --component python --prefix "$W/venv3" &&
    { [ -f "$W"/venv3/lib/python3*/site-packages/redlockc/__init__.py ] ||
      { echo "FAILED: not in the venv's site-packages:" >&2; find "$W/venv3" -name __init__.py -path '*redlockc*' >&2; false; }; } &&
    block bindings/python/README.md python >"$W/example.py" &&
    (cd "$W" && expect_out "python example (cmake --install into a venv)" "fencing token" \
      "$W/venv3/bin/python" example.py)
}

npm_fresh() { # DIR: a new project with its own npm cache
  mkdir -p "$1" && (cd "$1" && npm init -y >/dev/null 2>&1)
}
export npm_config_cache=$W/npm-cache npm_config_audit=false npm_config_fund=false \
  npm_config_update_notifier=false

part_node-tarball() { # npm pack, npm install <tarball>: koffi comes with it
  step "npm pack" npm pack --pack-destination "$W" "$TOP/bindings/node" &&
    npm_fresh "$W/app-tgz" &&
    (cd "$W/app-tgz" && step "npm install tarball" npm install "$W/redlockc-$VERSION.tgz") &&
    [ -d "$W/app-tgz/node_modules/koffi" ] &&
    block bindings/node/README.md node-cjs >"$W/app-tgz/main.js" &&
    block bindings/node/README.md node-esm >"$W/app-tgz/main.mjs" &&
    (cd "$W/app-tgz" && expect_out "node example (CommonJS)" "fencing token" node main.js) &&
    (cd "$W/app-tgz" && expect_out "node example (ES module)" "held; valid for" node main.mjs)
}

part_node-folder() { # npm install <folder> koffi, as the README says
  local copy=$W/node-src
  # A pristine copy of the folder: no node_modules or build from the test suites.
  mkdir -p "$copy" && (cd "$TOP/bindings/node" && git ls-files -z 2>/dev/null | xargs -0 cp --parents -t "$copy" 2>/dev/null ||
    cp -r "$TOP/bindings/node/." "$copy") &&
    rm -rf "$copy/node_modules" "$copy/build" &&
    npm_fresh "$W/app-dir" &&
    (cd "$W/app-dir" && step "npm install folder" npm install "$copy" koffi) &&
    block bindings/node/README.md node-cjs >"$W/app-dir/main.js" &&
    (cd "$W/app-dir" && expect_out "node example (folder)" "fencing token" node main.js)
}

part_go() { # a new module, go mod edit -replace to the checkout, build, run
  local mod=$W/goapp
  mkdir -p "$mod" &&
    (cd "$mod" &&
      export GOPATH=$W/gopath GOCACHE=$W/gocache GOPROXY=off GOFLAGS="-mod=mod -buildvcs=false" \
        CGO_LDFLAGS="-Wl,-rpath,$LIBDIR" &&
      step "go mod init" go mod init example.com/app &&
      step "go mod edit" go mod edit \
        -require=github.com/libredlockc/libredlockc/bindings/go@v0.0.0 \
        -replace=github.com/libredlockc/libredlockc/bindings/go="$TOP/bindings/go" &&
      block bindings/go/README.md go >main.go &&
      step "go build" go build -o app . &&
      expect_out "go example" "fencing token" ./app)
}

part_ruby() { # gem build, gem install --local into a new GEM_HOME
  mkdir -p "$W/gemsrc" && cp -r "$TOP/bindings/ruby/." "$W/gemsrc" &&
    (cd "$W/gemsrc" && step "gem build" gem build redlockc.gemspec) &&
    (export GEM_HOME=$W/gems GEM_PATH=$W/gems &&
      step "gem install" gem install --local --no-document "$W/gemsrc/redlockc-$VERSION.gem" &&
      block bindings/ruby/README.md ruby >"$W/example.rb" &&
      cd "$W" && expect_out "ruby example (gem)" "fencing token" \
        env REDLOCKC_LIBRARY="$LIBDIR/libredlockc.so.1" ruby example.rb)
}

part_lua() { # luarocks make with the rockspec, into a new tree
  (cd "$TOP" && step "luarocks make" luarocks --lua-version 5.4 --tree "$W/rocks" make \
    "packaging/redlockc-$VERSION-1.rockspec" REDLOCKC_DIR="$PREFIX" REDLOCKC_LIBDIR="$LIBDIR") &&
    rm -rf "$TOP/build.luarocks" &&
    block bindings/lua/README.md lua >"$W/example.lua" &&
    (cd "$W" && expect_out "lua example (luarocks)" "holding orders" \
      env LUA_PATH="$W/rocks/share/lua/5.4/?.lua;;" LUA_CPATH="$W/rocks/lib/lua/5.4/?.so;;" \
      lua5.4 example.lua)
}

passed=0
failed=()
for p in "${PARTS[@]}"; do
  start=$SECONDS
  if "part_$p"; then
    passed=$((passed + 1))
    echo "-- readme example $p: passed ($((SECONDS - start)) s)"
  else
    failed+=("$p")
    echo "-- readme example $p: FAILED ($((SECONDS - start)) s)"
  fi
done
((${#failed[@]})) && echo "README examples failed: ${failed[*]}"
echo "README examples: $passed passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
