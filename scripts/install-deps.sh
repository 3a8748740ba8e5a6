#!/usr/bin/env bash
# Installs what building and testing libredlockc needs on Debian 12, as root.
# Idempotent: installs only what is missing (apt-get update runs once, if needed).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config libhiredis-dev libssl-dev
  nftables iproute2
  redis-server redis-tools
  valgrind clang libclang-rt-14-dev
  swig python3-dev python3-pytest python3-pytest-asyncio python3-redis python3-prometheus-client
  python3-venv python3-pip python3-setuptools python3-wheel
  lua5.4 liblua5.4-dev luajit2 nginx libnginx-mod-http-lua luarocks
  abigail-tools dpkg-dev file curl procps openssl
  ruby golang-go
  postgresql-15 python3-psycopg2
)

missing=()
for p in "${PACKAGES[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == *"install ok installed"* ]] || missing+=("$p")
done
# Node.js: any recent one on PATH will do (koffi supports 16+); else Debian's.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# Java 17 and Maven: the interop suite runs real Redisson (tests/interop).
command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Valkey 8 (the suites also run against it: tests/valkey/run.sh) comes from
# bookworm-backports, whose source is added once.
if ! command -v valkey-server >/dev/null; then
  src=/etc/apt/sources.list.d/bookworm-backports.sources
  if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
      'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$src"
  fi
  echo "installing: valkey-server (bookworm-backports)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server >/dev/null
fi
# Debian starts the packaged services; the tests start their own servers.
for svc in redis-server valkey-server nginx; do
  if command -v service >/dev/null && service "$svc" status >/dev/null 2>&1; then
    service "$svc" stop >/dev/null 2>&1 || true
  fi
done
# The Node binding's own dependency (koffi) is installed in its folder: npm
# links a folder outside the application (`npm install <checkout>/bindings/node`)
# without installing its dependencies, and Node then finds them here, beside
# the real files. Its install script (the native helper) runs at first use.
node_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../bindings/node" && pwd)
if command -v npm >/dev/null && [ ! -d "$node_dir/node_modules/koffi" ]; then
  (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    echo "install-deps: npm ci in bindings/node failed; install koffi with the binding" >&2
fi
