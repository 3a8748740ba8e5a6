#!/usr/bin/env bash
# run.sh - the benchmarks in one command (never part of the test suite):
#
#   bash tests/bench/run.sh [--quick] [--seconds N] [--repeats N] [--only NAME]
#                           [--wd-seconds N] [--wd-locks N]
#
# Builds rlc_bench (Release, in build-bench/ or $RLC_BENCH_BUILD), installs
# the Node peer (redlock v5 + ioredis) from npm into a temporary directory,
# runs every workload against redis-server nodes it starts itself, and prints
# the table. The raw rows and the children's stderr are kept in
# <build>/bench/ (rows.jsonl, bench.log, table.txt).
# Default: 3 repeats x 3 s per workload + 3 x 30 s watchdog, about 6 minutes.
# --quick: 1 repeat x 1 s, watchdog 6 s, about 30 s (a CI smoke, not a test).
# Without --quick, the peers too (tests/bench/peers: Redisson, redsync,
# rueidislock, asyncio locks, server time per cycle); without --quick and
# --only, plot.py then writes docs/bench/ (plots and results.md).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${RLC_BENCH_BUILD:-$root/build-bench}
out=$build/bench
args=("$@")

for tool in redis-server redis-benchmark cmake; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 2; }
done

# The Python module is built only if the Python driver exists to use it.
py_script=$root/tests/bench/bench_python.py
cmake_opts=(-DCMAKE_BUILD_TYPE=Release)
[[ -f $py_script ]] && cmake_opts+=(-DRLC_PYTHON=ON)
echo "run.sh: building in $build" >&2
if ! cmake -S "$root" -B "$build" "${cmake_opts[@]}" >/dev/null; then
  # Without the Python module the rest still runs; its row will say why not.
  echo "run.sh: configuring with the Python module failed; building without it" >&2
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRLC_PYTHON=OFF >/dev/null
fi
if [[ -f $py_script ]]; then
  # Everything, for the Python module; if another area does not build right
  # now, the driver below still must.
  cmake --build "$build" -j2 >"$build/bench-build.log" 2>&1 ||
    echo "run.sh: the full build failed (see $build/bench-build.log); going on" >&2
fi
cmake --build "$build" -j2 --target rlc_bench >/dev/null
mkdir -p "$out"

# node-redlock v5 is published as prereleases only (5.0.0-beta2 is the
# newest), which a plain "redlock@5" does not match; pin it.
node_dir=$(mktemp -d /tmp/rlc-bench-node.XXXXXX)
trap 'rm -rf "$node_dir"' EXIT
node_args=()
if command -v npm >/dev/null && command -v node >/dev/null &&
  timeout 300 npm install --prefix "$node_dir" --no-audit --no-fund --no-save \
    --loglevel=error redlock@5.0.0-beta2 'ioredis@^5' >"$out/npm.log" 2>&1; then
  node_args=(--node-dir "$node_dir" --node-js "$root/tests/bench/node/bench.js")
else
  echo "run.sh: npm could not install the Node peer (see $out/npm.log): its rows say not run" >&2
fi

# Python packages /usr/bin/python3 lacks (redis for the drivers, matplotlib for
# plot.py) go into a venv in the build tree, from PyPI; its site-packages join
# PYTHONPATH. The peers (tests/bench/peers/build.sh): Redisson, redsync and
# rueidislock, built from Maven Central and the Go proxy; not with --quick.
quick=0
[[ " ${args[*]:-} " == *" --quick "* ]] && quick=1
py_extra=$(bash "$root/tests/bench/peers/venv.sh" "$build/bench-venv" "$out/pip.log" redis) ||
  echo "run.sh: pip could not install redis (see $out/pip.log): the Python rows will say why" >&2
export RLC_BENCH_NODE_DIR=${node_args:+$node_dir}
if ((quick == 0)); then
  export RLC_BENCH_PEERS=all
  source "$root/tests/bench/peers/build.sh" "$build" "$out"
fi
py_script=$root/tests/bench/peers/peers.py
py_args=(--py-script "$py_script" --py-path "$build/bindings/python${py_extra:+:$py_extra}")

"$build/tests/bench/rlc_bench" "${args[@]}" "${node_args[@]}" "${py_args[@]}" \
  --out "$out/rows.jsonl" --log "$out/bench.log"
/usr/bin/python3 "$root/tests/bench/table.py" "$out/rows.jsonl" | tee "$out/table.txt"
# The peers' table, plots and results page (docs/bench/), from a full run only.
if ((quick == 0)) && [[ " ${args[*]:-} " != *" --only "* ]]; then
  plot_py=$(bash "$root/tests/bench/peers/venv.sh" "$build/bench-venv" "$out/pip.log" matplotlib) ||
    plot_py=
  PYTHONPATH=$plot_py /usr/bin/python3 "$root/tests/bench/plot.py" "$out/rows.jsonl" \
    --out "$root/docs/bench" --args "${args[*]:-}" ||
    echo "run.sh: plot.py failed (see above; pip: $out/pip.log)" >&2
fi

# The lock family (tests/bench/family.c): fair and write hand-off beside
# RLock's, read cycles/s with 16 readers. --quick: 1 repeat x 1 s.
fam_args=(--seconds 3 --repeats 3)
[[ " ${args[*]:-} " == *" --quick "* ]] && fam_args=(--seconds 1 --repeats 1)
cmake --build "$build" -j2 --target rlc_bench_family >/dev/null
"$build/tests/bench/rlc_bench_family" "${fam_args[@]}" 2>>"$out/bench.log" | tee "$out/family.txt"

# A 3+3 Redis Cluster beside one node (tests/bench/cluster.c): cycles/s over
# many names, hand-off p50 through sharded pub/sub. --quick: 1 repeat x 1 s.
clu_args=(--seconds 3 --repeats 3)
[[ " ${args[*]:-} " == *" --quick "* ]] && clu_args=(--seconds 1 --repeats 1)
cmake --build "$build" -j2 --target rlc_bench_cluster >/dev/null
"$build/tests/bench/rlc_bench_cluster" "${clu_args[@]}" 2>>"$out/bench.log" | tee "$out/cluster.txt" ||
  echo "run.sh: the cluster benchmark failed (see $out/bench.log)" >&2

# The engine on one event-loop thread beside bare hiredis (tests/bench/engine.c).
eng_secs=3
[[ " ${args[*]:-} " == *" --quick "* ]] && eng_secs=1
cmake --build "$build" -j2 --target rlc_bench_engine >/dev/null
"$build/tests/bench/rlc_bench_engine" "$eng_secs" 2>>"$out/bench.log" | tee "$out/engine.txt"

# The Python asyncio driver (tests/bench/bench_asyncio.py): redlockc.asyncio
# beside redis-py's redis.asyncio Lock in the same run, and 10,000 waiting
# tasks over 100 names. --quick: 1 s per workload, 2,000 waiters on 20 names.
if [[ -f $build/bindings/python/redlockc/asyncio.py ]]; then
  aio_args=(--seconds 3)
  [[ " ${args[*]:-} " == *" --quick "* ]] && aio_args=(--seconds 1 --waiters 2000 --locks 20 --cap 20)
  PYTHONPATH=$build/bindings/python /usr/bin/python3 "$root/tests/bench/bench_asyncio.py" \
    "${aio_args[@]}" 2>>"$out/bench.log" | tee "$out/asyncio.txt" ||
    echo "run.sh: the asyncio benchmark failed (see $out/bench.log)" >&2
else
  echo "asyncio: not run (no Python module in $build)"
fi

# The server's own time per lock cycle (tests/bench/server_cost.py): SET NX
# PX, Redisson's scripts and this library on one server, on Redis and, when
# installed, Valkey. --quick: 2,000 cycles and names.
if [[ -f $build/bindings/python/redlockc/__init__.py ]]; then
  cost_args=()
  [[ " ${args[*]:-} " == *" --quick "* ]] && cost_args=(--cycles 2000 --names 2000)
  for server in redis-server valkey-server; do
    command -v "$server" >/dev/null || continue
    PYTHONPATH=$build/bindings/python /usr/bin/python3 "$root/tests/bench/server_cost.py" \
      --server "$server" "${cost_args[@]}" 2>>"$out/bench.log" | tee -a "$out/server_cost.txt" ||
      echo "run.sh: the server-cost benchmark failed (see $out/bench.log)" >&2
  done
fi

# The Node binding on the engine (tests/bench/node/engine_bench.js): 10,000
# acquires waiting at once over 100 locks, and 64 tasks' cycles over one
# connection beside a bare client and node-redlock (when npm installed it).
if command -v node >/dev/null && [ -d "$root/bindings/node/node_modules/koffi" ]; then
  nb_args=(--seconds 3)
  [[ " ${args[*]:-} " == *" --quick "* ]] && nb_args=(--seconds 1)
  (cd "$root/bindings/node" &&
    REDLOCKC_INCLUDE_DIR=$root/c/include REDLOCKC_LIB_DIR=$build/c node build.js) &&
    NODE_PATH=$node_dir/node_modules timeout 600 node --expose-gc \
      "$root/tests/bench/node/engine_bench.js" "${nb_args[@]}" 2>>"$out/bench.log" |
    tee "$out/node_engine.txt" || echo "run.sh: the Node engine benchmark failed (see $out/bench.log)" >&2
else
  echo "run.sh: no node or no bindings/node/node_modules/koffi (scripts/install-deps.sh): Node engine benchmark not run" >&2
fi

# OpenResty (tests/bench/openresty): one nginx worker, resty.redlockc beside
# the blocking module. Needs nginx + libnginx-mod-http-lua; says why not.
if command -v nginx >/dev/null && [ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ]; then
  resty_args=()
  [[ " ${args[*]:-} " == *" --quick "* ]] && resty_args=(--quick)
  RLC_BENCH_BUILD=$build bash "$root/tests/bench/openresty/run.sh" "${resty_args[@]}" ||
    echo "run.sh: the OpenResty benchmark failed" >&2
else
  echo "OpenResty: not run (nginx or libnginx-mod-http-lua is not installed)"
fi
