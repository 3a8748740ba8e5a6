"""`cmake --install`: the package lands in site-packages and finds its library.

Installs the build (RLC_BUILD_DIR, set by run.sh) into a temporary prefix,
then runs /usr/bin/python3 on that copy alone: no build tree on sys.path, no
LD_LIBRARY_PATH, so libredlockc.so.1 is found through the module's RUNPATH.
"""
import glob
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("RLC_BUILD_DIR")

CHILD = r"""
import sys, redlockc
client = redlockc.Client(sys.argv[1])
lock = client.lock("installed")
assert lock.acquire(timeout=5)
lock.release()
with open("/proc/self/maps") as f:
    libs = {line.split()[-1] for line in f if "libredlockc.so" in line}
print(redlockc.__file__)
print(*sorted(libs))
"""


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not BUILD or not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.skip("RLC_BUILD_DIR does not name a CMake build (run tests/python/run.sh)")
    root = tmp_path_factory.mktemp("prefix")
    for component in ("runtime", "python"):
        done = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(root),
                               "--component", component],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"cmake --install {component}: {done.stderr}"
    return root


def test_the_package_is_installed_into_site_packages(prefix):
    found = glob.glob(f"{prefix}/lib/python3*/*-packages/redlockc/__init__.py")
    assert len(found) == 1, f"one redlockc package under <prefix>/lib/python3*/: {found}"
    package = os.path.dirname(found[0])
    names = set(os.listdir(package))
    for expected in ("__init__.py", "__init__.pyi", "py.typed", "redlockc_core.py"):
        assert expected in names, f"{expected} is not installed: {sorted(names)}"
    assert any(n.startswith("_redlockc_core.") and n.endswith(".so") for n in names), \
        f"the compiled module is not installed: {sorted(names)}"


def test_the_installed_copy_runs_on_the_prefixs_library(prefix, server):
    site = os.path.dirname(os.path.dirname(
        glob.glob(f"{prefix}/lib/python3*/*-packages/redlockc/__init__.py")[0]))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = site
    done = subprocess.run([sys.executable, "-c", CHILD, server.uri], env=env, cwd=str(prefix),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"the installed module failed: {done.stderr}"
    module, libs = done.stdout.splitlines()
    assert module.startswith(site), f"imported {module}, not the installed copy under {site}"
    # The package carries its own copy (RLC_PYTHON_BUNDLE_LIB, on outside /usr),
    # found first through $ORIGIN; either way one inside the prefix.
    installed = glob.glob(f"{prefix}/lib/**/libredlockc.so.1", recursive=True)
    loaded = {os.path.realpath(p) for p in libs.split()}
    assert len(loaded) == 1 and loaded <= {os.path.realpath(p) for p in installed}, \
        f"libredlockc loaded from {loaded}, expected one of the prefix's {installed} (via RUNPATH)"


def test_the_python_component_alone_imports_and_runs(tmp_path, server):
    done = subprocess.run(["cmake", "--install", BUILD, "--prefix", str(tmp_path),
                           "--component", "python"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"cmake --install python: {done.stderr}"
    site = os.path.dirname(os.path.dirname(
        glob.glob(f"{tmp_path}/lib/python3*/*-packages/redlockc/__init__.py")[0]))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = site
    done = subprocess.run([sys.executable, "-c", CHILD, server.uri], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"ImportError or failure with the python component alone: {done.stderr}"
    assert done.stdout.splitlines()[1].startswith(site), \
        f"the library comes from the package itself: {done.stdout}"
