#!/usr/bin/env bash
# The compat suite: redlockc.compat (redis-py's lock_class on the classic
# format) judged by redis-py's own lock tests, then by test_adapter.py.
#   bash tests/compat/run.sh [pytest args for both runs, e.g. -x or -k name]
# Downloads the redis-py sdist of the pinned version from PyPI (its tests
# are in it; never committed), installs it with pytest into a venv, and runs
# tests/test_lock.py and tests/test_asyncio/test_lock.py unedited with the
# lock classes swapped by compat_plugin.py; the tests of
# expected_failures.txt are strict xfails (README.md says why each fails).
# Everything goes into a temporary directory, removed at the end;
# RLC_COMPAT_PEERS=DIR keeps it in DIR instead, and reuses what is there.
# Needs /usr/bin/python3 with venv, the module from a build tree made with
# -DRLC_PYTHON=ON (RLC_BUILD_DIR, default ./build); RLC_SERVER picks the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=$PWD/tests/compat
# BUILD, PKG, the module up to date and on PYTHONPATH.
source tests/support/python_module.sh

# The newest releases on PyPI when this was written (redis-py: the version
# the classic interop suite runs too).
REDIS_PY=8.1.0
TOOLS=(pytest==9.2.0 pytest-asyncio==1.5.0 packaging==26.4)

if [ -n "${RLC_COMPAT_PEERS:-}" ]; then
  WORK=$RLC_COMPAT_PEERS
  mkdir -p "$WORK"
else
  WORK=$(mktemp -d /tmp/rlc-compat.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
fi
SDIST=$WORK/redis-$REDIS_PY

start=$SECONDS
setup() {
  /usr/bin/python3 -m venv "$WORK/venv" &&
    timeout 300 "$WORK/venv/bin/pip" download -q --disable-pip-version-check \
      --no-binary redis --no-deps -d "$WORK" "redis==$REDIS_PY" &&
    tar -xzf "$WORK/redis-$REDIS_PY.tar.gz" -C "$WORK" &&
    timeout 300 "$WORK/venv/bin/pip" install -q --disable-pip-version-check \
      "$WORK/redis-$REDIS_PY.tar.gz" "${TOOLS[@]}"
}
if [ -e "$SDIST/tests/test_lock.py" ] && [ -x "$WORK/venv/bin/python" ]; then
  echo "setup: redis-py $REDIS_PY already in $WORK"
elif ! setup >"$WORK/setup.log" 2>&1; then
  echo "compat: fetching or installing redis-py $REDIS_PY failed:" >&2
  tail -30 "$WORK/setup.log" >&2
  exit 1
else
  echo "setup: redis-py $REDIS_PY sdist and venv in $((SECONDS - start)) s"
fi

export PYTHONDONTWRITEBYTECODE=1 PYTHONFAULTHANDLER=1
export PYTHONPATH=$PYTHONPATH:$HERE # compat_plugin
PY=$WORK/venv/bin/python
status=0
# pytest's exit status: 5 (nothing selected) is a failure only without args.
judge() {
  local rc=$1
  if ((rc != 0)) && ! ((rc == 5 && $# > 1)); then status=1; fi
}

# 1. redis-py's own tests, in the sdist (its conftest.py and pytest settings);
#    the plugin starts the redis-server and gives it as --redis-url.
echo "--- redis-py $REDIS_PY tests/test_lock.py, tests/test_asyncio/test_lock.py on redlockc.compat"
t=$SECONDS
(cd "$SDIST" && "$PY" -m pytest -q -p no:cacheprovider -p no:warnings -p compat_plugin -rxX \
  tests/test_lock.py tests/test_asyncio/test_lock.py "$@") && rc=0 || rc=$?
judge $rc "$@"
echo "($((SECONDS - t)) s)"

# 2. Ours: a mixed fleet, redis-py's settings reaching the library.
echo "--- tests/compat/test_adapter.py"
t=$SECONDS
"$PY" -m pytest -q -p no:cacheprovider -p no:asyncio --rootdir "$HERE" -c /dev/null \
  "$HERE/test_adapter.py" "$@" && rc=0 || rc=$?
judge $rc "$@"
echo "($((SECONDS - t)) s)"

echo "compat: $((SECONDS - start)) s in all"
exit $status
