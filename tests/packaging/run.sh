#!/usr/bin/env bash
# The packaging suite (bash tests/run_all.sh packaging), in RLC_BUILD_DIR
# (default build/): the ABI guard, install into a temporary prefix with three
# consumers, the Debian packages (dpkg -i, then removed), the redlockc CLI
# tests (pytest), each binding installed the way its README says with the
# README's own example run (readme_examples.sh), and the quick-start demo.
set -uo pipefail
cd "$(dirname "$0")/../.."
export RLC_BUILD_DIR=${RLC_BUILD_DIR:-$PWD/build}
[ -f "$RLC_BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$RLC_BUILD_DIR" -DRLC_WERROR=ON >/dev/null || exit 1
cmake --build "$RLC_BUILD_DIR" -j"$(nproc)" >/dev/null || exit 1

passed=0
failed=()
part() { # NAME CMD...
  local name=$1 start=$SECONDS
  shift
  echo "--- packaging: $name"
  if "$@"; then
    passed=$((passed + 1))
    echo "--- packaging: $name passed ($((SECONDS - start)) s)"
  else
    failed+=("$name")
    echo "--- packaging: $name FAILED ($((SECONDS - start)) s)"
  fi
}

demo_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

part "metadata and LICENSE" /usr/bin/python3 tests/packaging/metadata_check.py
part "ABI check" bash tests/packaging/abi_check.sh
part "install and consumers" bash tests/packaging/install_check.sh
part "Debian packages" bash tests/packaging/deb_check.sh
part "CLI" env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/cli
part "README examples, each binding installed its documented way" bash tests/packaging/readme_examples.sh
part "Python wheel: python -m build, auditwheel, no compiler, README examples and mypy" bash tests/packaging/python_wheel.sh
part "Node tarball: prebuilt, no compiler, README examples and tsc" bash tests/packaging/node_tarball.sh
part "Go module: go get from a GOPROXY directory, pkg-config, README example" bash tests/packaging/go_proxy.sh
part "quick-start demo" env DEMO_PORT="$demo_port" bash scripts/quickstart.sh

((${#failed[@]})) && echo "failed: ${failed[*]}"
echo "packaging: $passed passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
