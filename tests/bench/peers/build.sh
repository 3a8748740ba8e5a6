# build.sh BUILD OUT - sourced by tests/bench/run.sh: builds the Java and Go
# peers into BUILD and exports what tests/bench/peers/peers.py reads:
#
#   RLC_BENCH_REDISSON_CP  the classpath of bench.Bench (Redisson from Maven
#                          Central, at tests/interop/redisson/pom.xml's pin),
#                          or RLC_BENCH_REDISSON_WHY: why not
#   RLC_BENCH_GO_BIN       the redsync + rueidislock binary (go.mod's pins,
#                          from the Go module proxy), or RLC_BENCH_GO_WHY
#
# Never fails the run: a peer that does not build is reported "not run".
peers_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
peers_build=$1/bench-peers
mkdir -p "$peers_build"
export RLC_BENCH_REDISSON_CP= RLC_BENCH_REDISSON_WHY= RLC_BENCH_GO_BIN= RLC_BENCH_GO_WHY=

peers_redisson() {
  local pom=$peers_dir/redisson/pom.xml target=$peers_build/redisson version
  version=$(sed -n 's:.*<redisson.version>\(.*\)</redisson.version>.*:\1:p' \
    "$peers_dir/../../interop/redisson/pom.xml")
  local mvn_args=(-q -B -Dstyle.color=never -f "$pom" -Dredisson.version="$version"
    -Dbench.target="$target" -Dmdep.outputFile="$target/classpath.txt"
    compile dependency:build-classpath)
  if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    RLC_BENCH_REDISSON_WHY="java or mvn is not installed"
  elif timeout 120 mvn -o "${mvn_args[@]}" >"$2/maven.log" 2>&1 ||
    timeout 600 mvn "${mvn_args[@]}" >"$2/maven.log" 2>&1; then
    RLC_BENCH_REDISSON_CP=$target/classes:$(cat "$target/classpath.txt")
    echo "run.sh: Redisson $version built for the peers" >&2
  else
    RLC_BENCH_REDISSON_WHY="maven could not build Redisson $version (see $2/maven.log)"
  fi
}

peers_go() {
  if ! command -v go >/dev/null; then
    RLC_BENCH_GO_WHY="go is not installed"
  elif (cd "$peers_dir/go" && timeout 600 go build -mod=readonly -o "$peers_build/go-peers" .) \
    >"$2/go.log" 2>&1; then
    RLC_BENCH_GO_BIN=$peers_build/go-peers
  else
    RLC_BENCH_GO_WHY="go build failed (see $2/go.log)"
  fi
}

peers_redisson "$1" "$2"
peers_go "$1" "$2"
[[ -n $RLC_BENCH_REDISSON_WHY ]] && echo "run.sh: Redisson not run: $RLC_BENCH_REDISSON_WHY" >&2
[[ -n $RLC_BENCH_GO_WHY ]] && echo "run.sh: Go peers not run: $RLC_BENCH_GO_WHY" >&2
true
