#!/usr/bin/env bash
# The Python suite: pytest (Debian's, /usr/bin/python3) against real
# redis-server processes, on the module in a build tree made with
# -DRLC_PYTHON=ON (RLC_BUILD_DIR, default ./build).
#   bash tests/python/run.sh [pytest args and paths; default: tests/python]
set -euo pipefail
cd "$(dirname "$0")/../.."
# BUILD, PKG, the module up to date and on PYTHONPATH.
source tests/support/python_module.sh
# test_install.py installs this build into a temporary prefix.
export RLC_BUILD_DIR=$BUILD
# Faults (a crash of the module) show a Python traceback of every thread.
export PYTHONFAULTHANDLER=1
# No __pycache__ in the source tree.
export PYTHONDONTWRITEBYTECODE=1
# Only this suite, unless paths inside it were given.
paths=0
for a in "$@"; do [ -e "${a%%::*}" ] && paths=1; done
((paths)) || set -- "$@" tests/python
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
