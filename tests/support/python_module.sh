# python_module.sh - sourced by the suites that run the Python binding of a
# build tree: sets BUILD (RLC_BUILD_DIR, default ./build, made absolute)
# and PKG (its bindings/python), brings the module up to date with the
# sources, and puts it first on PYTHONPATH; stops the suite with a clear
# message when the build tree has no module. Run from the source root.
BUILD=$(cd "${RLC_BUILD_DIR:-$PWD/build}" 2>/dev/null && pwd) || BUILD=${RLC_BUILD_DIR:-$PWD/build}
PKG=$BUILD/bindings/python
if [ ! -f "$PKG/redlockc/__init__.py" ]; then
  echo "no Python module in $PKG: configure $BUILD with -DRLC_PYTHON=ON and build it" >&2
  exit 1
fi
cmake --build "$BUILD" --target rlc_python_core -j"$(nproc)" >/dev/null
export PYTHONPATH=$PKG${PYTHONPATH:+:$PYTHONPATH}
