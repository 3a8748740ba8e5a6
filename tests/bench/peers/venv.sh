#!/usr/bin/env bash
# venv.sh VENV LOG MODULE... - makes /usr/bin/python3 able to import MODULEs.
#
# Prints nothing when /usr/bin/python3 already imports them all; else makes
# (once) a venv at VENV with /usr/bin/python3, pip-installs the missing ones
# from PyPI into it (output to LOG) and prints its site-packages directory,
# for PYTHONPATH. Exits non-zero when pip could not install them.
set -euo pipefail
venv=$1 log=$2
shift 2
missing=()
for m in "$@"; do
  /usr/bin/python3 -c "import $m" 2>/dev/null || missing+=("$m")
done
((${#missing[@]} == 0)) && exit 0
[[ -x $venv/bin/pip ]] || /usr/bin/python3 -m venv "$venv" >>"$log" 2>&1
timeout 600 "$venv/bin/pip" install --disable-pip-version-check "${missing[@]}" >>"$log" 2>&1
"$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
