#!/usr/bin/env bash
# The interop suite: real Redisson (Java, from Maven Central at test time)
# against this library's Python binding on the same names, same server.
#   bash tests/interop/run.sh [scenario ...]   (lock rw fair sem psem multi; default all)
# Needs Java 17 and Maven; the module from a build tree made with
# -DRLC_PYTHON=ON (RLC_BUILD_DIR, default ./build); RLC_SERVER picks the server.
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in java mvn; do
  command -v $tool >/dev/null || {
    echo "interop: no $tool on PATH (Debian: apt-get install openjdk-17-jdk-headless maven)" >&2
    exit 1
  }
done
# BUILD, PKG, the module up to date and on PYTHONPATH.
source tests/support/python_module.sh

# The Java side: compiled into the build tree; Redisson resolved by Maven
# (offline once the local repository has it).
OUT=$BUILD/interop-redisson
mvn_build() {
  mvn -q -B -Dstyle.color=never "$@" -f tests/interop/redisson/pom.xml compile dependency:build-classpath \
    -Dinterop.target="$OUT" -Dmdep.outputFile="$OUT/classpath.txt"
}
mkdir -p "$OUT"
mvn_build -o >/dev/null 2>&1 || mvn_build >"$OUT/maven.log" 2>&1 || {
  cat "$OUT/maven.log" >&2
  exit 1
}
CP=$OUT/classes:$(cat "$OUT/classpath.txt")

export PYTHONDONTWRITEBYTECODE=1 PYTHONFAULTHANDLER=1
exec /usr/bin/python3 tests/interop/redisson/judge.py "$CP" "$@"
