#!/usr/bin/env bash
# The Go binding got the way a Go user gets any module: `go get` from a
# module proxy. This lays bindings/go out as a GOPROXY directory (the
# proxy protocol's files: @v/list, @v/VERSION.info, .mod and .zip, the
# version the library's), installs the library into a temporary prefix, and
# in a new module with an empty GOPATH, module cache and build cache runs
#   GOPROXY=file://DIR,off go get MODULE@vVERSION
# then builds the README's example and runs it against a real redis-server.
# cgo finds the library through the prefix's redlockc.pc (PKG_CONFIG_PATH,
# as the README says for a non-standard prefix): no replace directive, no
# CGO_LDFLAGS, no sum database (GONOSUMDB names the module; go.sum still
# records the zip's hash).
#   RLC_BUILD_DIR=build bash tests/packaging/go_proxy.sh [PROXY_DIR]
# With PROXY_DIR the proxy directory is made there and kept.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=${RLC_BUILD_DIR:-$TOP/build}
source "$HERE/check.sh"
source "$HERE/redis.sh"

work=$(mktemp -d /tmp/rlc-goproxy-XXXXXX)
cleanup() {
  redis_stop
  chmod -R u+w "$work" 2>/dev/null # the module cache is read-only
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

for tool in go pkg-config cmake /usr/bin/python3 redis-server; do
  command -v "$tool" >/dev/null || {
    fail "$tool is installed" "$tool on PATH" "not found"
    check_summary
    exit 1
  }
done

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
prefix=$work/prefix
libdir=$prefix/$(cache CMAKE_INSTALL_LIBDIR)
echo "--- the library, installed into $prefix"
expect_run "cmake --install into a temporary prefix" cmake --install "$BUILD" --prefix "$prefix" || {
  check_summary
  exit 1
}
export PKG_CONFIG_PATH=$libdir/pkgconfig
version=v$(pkg-config --modversion redlockc)
module=$(sed -n 's/^module[[:space:]]*//p' "$TOP/bindings/go/go.mod")
expect_match "the module's version is the library's (pkg-config --modversion)" '^v[0-9]+\.[0-9]+\.[0-9]+$' "$version"

# ---- the proxy directory -----------------------------------------------------
proxy=${1:-$work/proxy}
echo "--- GOPROXY directory $proxy: $module@$version"
# The proxy protocol escapes capitals in a path as '!' and the lower case.
escaped=$(sed 's/[A-Z]/!\L&/g' <<<"$module")
vdir=$proxy/$escaped/@v
mkdir -p "$vdir"
# The module's files: bindings/go without nested modules (promredlock has a
# go.mod of its own), plus the repository's LICENSE, as the go command
# includes a root LICENSE in a subdirectory module's zip.
expect_run "the module zip (files under $module@$version/)" /usr/bin/python3 - "$TOP" "$module" "$version" "$vdir/$version.zip" <<'EOF'
import os, sys, zipfile
top, module, version, out = sys.argv[1:]
src = os.path.join(top, "bindings", "go")
names = []
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    if rel != "." and os.path.exists(os.path.join(root, "go.mod")):
        dirs[:] = []  # a nested module is a module of its own
        continue
    dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
    names += [os.path.normpath(os.path.join(rel, f)) for f in files if not f.startswith(".")]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for n in sorted(names):
        z.write(os.path.join(src, n), f"{module}@{version}/{n}")
    if "LICENSE" not in names:
        z.write(os.path.join(top, "LICENSE"), f"{module}@{version}/LICENSE")
EOF
cp "$TOP/bindings/go/go.mod" "$vdir/$version.mod"
stamp=$(git -C "$TOP" log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
stamp=$(date -u -d "$stamp" +%Y-%m-%dT%H:%M:%SZ)
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$stamp" >"$vdir/$version.info"
echo "$version" >"$vdir/list"
expect_eq "the proxy's files" "list $version.info $version.mod $version.zip" "$(ls "$vdir" | sort | xargs)"

# ---- a user's module ------------------------------------------------------------
echo "--- a new module: go get $module@$version from file://$proxy"
redis_start || {
  fail "redis-server starts" "PONG" "no answer"
  check_summary
  exit 1
}
app=$work/app
mkdir -p "$app"
unset CGO_LDFLAGS CGO_CFLAGS GOFLAGS GOPRIVATE GONOPROXY GOSUMDB
export GOPATH=$work/gopath GOMODCACHE=$work/gopath/pkg/mod GOCACHE=$work/gocache \
  GOPROXY=file://$proxy,off GONOSUMDB=$module GOFLAGS="-mod=mod -buildvcs=false" \
  GOTOOLCHAIN=local CGO_ENABLED=1 GO111MODULE=on
cd "$app" || exit 1
expect_run "go mod init example.com/app" go mod init example.com/app
/usr/bin/python3 "$HERE/readme_blocks.py" "$TOP/bindings/go/README.md" go >main.go
expect_run "go get $module@$version" go get "$module@$version"
expect_match "go.mod requires $module $version" "require $module $version" "$(cat go.mod)"
expect_no_match "go.mod has no replace directive" "replace" "$(cat go.mod)"
expect_match "go.sum records the zip's hash" "^$module $version h1:" "$(cat go.sum)"
expect_eq "the module cache holds the module from the proxy" "$version" \
  "$(go list -m -f '{{.Version}}' "$module" 2>&1)"
expect_run "go build (cgo through pkg-config redlockc)" go build -o app . || {
  check_summary
  exit 1
}
expect_match "the program needs libredlockc.so.1" "libredlockc\.so\.1" \
  "$(readelf -d app | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
expect_output "the README example takes the lock and prints its fencing token" "fencing token [0-9]+" \
  env LD_LIBRARY_PATH="$libdir" REDLOCKC_NODES="$REDIS_URI" timeout 60 ./app
expect_eq "the example's lock is gone from Redis" "0" "$(redis_cli exists orders)"
check_summary
