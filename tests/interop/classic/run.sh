#!/usr/bin/env bash
# The classic-format interop suite: the real peers that use the one-key
# SET NX PX layout (redis-py's Lock and redis.asyncio Lock, pottery's Redlock,
# node-redlock, redsync) against this library's Python binding with
# format="classic", on the same names and the same servers.
#   bash tests/interop/classic/run.sh [peer ...]
#     peers: redispy aioredispy pottery noderedlock redsync (default: all)
# Installs every peer from its registry into a temporary directory (a venv for
# PyPI, an npm prefix, a Go module), removed at the end; RLC_CLASSIC_PEERS=DIR
# keeps them in DIR instead, and reuses what is already there.
# Needs python3 (venv), node + npm, go; the module from a build tree made with
# -DRLC_PYTHON=ON (RLC_BUILD_DIR, default ./build); RLC_SERVER picks the server.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=$PWD/tests/interop/classic
for tool in node npm go; do
  command -v $tool >/dev/null || {
    echo "classic: no $tool on PATH (scripts/install-deps.sh installs it)" >&2
    exit 1
  }
done
# BUILD, PKG, the module up to date and on PYTHONPATH.
source tests/support/python_module.sh

# The peers' versions: the newest each registry served when this was written
# (go-redis v9: the version redsync asks for).
REDIS_PY=redis==8.1.0
POTTERY=pottery==3.0.1
NODE_REDLOCK=redlock@5.0.0-beta2 # v5 is published as prereleases only
IOREDIS=ioredis@5.9.3
REDSYNC=github.com/go-redsync/redsync/v4@v4.18.1

if [ -n "${RLC_CLASSIC_PEERS:-}" ]; then
  PEERS=$RLC_CLASSIC_PEERS
  mkdir -p "$PEERS"
else
  PEERS=$(mktemp -d /tmp/rlc-classic-peers.XXXXXX)
  trap 'rm -rf "$PEERS"' EXIT
fi

# Each install says how long it took (the README's figures); a failed one
# stops the suite with its log: nothing is skipped.
install() { # name marker command...
  local name=$1 marker=$2 start=$SECONDS
  shift 2
  if [ -e "$marker" ]; then
    echo "install  $name: already in $PEERS"
    return
  fi
  if ! "$@" >"$PEERS/$name.log" 2>&1; then
    echo "classic: installing $name failed:" >&2
    tail -30 "$PEERS/$name.log" >&2
    exit 1
  fi
  echo "install  $name: $((SECONDS - start)) s"
}

py_peers() {
  /usr/bin/python3 -m venv "$PEERS/venv" &&
    timeout 300 "$PEERS/venv/bin/pip" install -q --disable-pip-version-check "$REDIS_PY" "$POTTERY"
}
node_peer() {
  mkdir -p "$PEERS/node" &&
    timeout 300 npm install --prefix "$PEERS/node" --no-audit --no-fund --no-save \
      --loglevel=error "$NODE_REDLOCK" "$IOREDIS"
}
go_peer() {
  mkdir -p "$PEERS/go" && cp "$HERE/peer_go.go" "$PEERS/go/main.go" &&
    (cd "$PEERS/go" && { [ -f go.mod ] || go mod init classicpeer; } &&
      timeout 300 go get "$REDSYNC" && go mod tidy && go build -o peer_go .)
}
install "redis-py+pottery (PyPI)" "$PEERS/venv/bin/python" py_peers
install "node-redlock+ioredis (npm)" "$PEERS/node/node_modules/redlock" node_peer
install "redsync+go-redis (Go proxy)" "$PEERS/go/peer_go" go_peer

export PYTHONDONTWRITEBYTECODE=1 PYTHONFAULTHANDLER=1
export CLASSIC_PEER_PY=$PEERS/venv/bin/python
export CLASSIC_PEER_NODE_PATH=$PEERS/node/node_modules
export CLASSIC_PEER_GO=$PEERS/go/peer_go
# The judge runs in the peers' venv (its redis-py), with the build's module.
"$PEERS/venv/bin/python" "$HERE/judge.py" "$@" # not exec: the EXIT trap removes PEERS
