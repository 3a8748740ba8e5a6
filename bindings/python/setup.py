"""Builds the redlockc package: SWIG's redlockc_core module and the Python files.

Metadata is in pyproject.toml; this file only says how to build the
extension, from a checkout of libredlockc (bindings/python is built in place,
as pip does for a local directory). Where libredlockc comes from is chosen by
REDLOCKC_LINK:

  auto (default)  "system" if `pkg-config redlockc` finds an installed
                  library, else "bundle"
  system          link the installed libredlockc.so.1 (pkg-config; set
                  PKG_CONFIG_PATH=<prefix>/lib/pkgconfig for a prefix); the
                  module gets a RUNPATH to its directory unless it is /usr's
  bundle          compile the library's C sources (c/src of this checkout)
                  into the module itself, their symbols hidden; needs only
                  hiredis and OpenSSL (Debian: libhiredis-dev, libssl-dev)

SWIG (Debian: swig) and a C compiler are needed either way.
"""
import glob
import os
import re
import subprocess
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("REDLOCKC_SOURCE_DIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
SWIG_I = os.path.join(TOP, "bindings", "swig", "redlockc.i")
INCLUDE = os.path.join(TOP, "c", "include")
SYSTEM_LIBDIRS = {"/usr/lib", "/usr/lib64", "/lib", "/usr/lib/x86_64-linux-gnu",
                  "/usr/lib/aarch64-linux-gnu"}


def pkg_config(*args):
    try:
        done = subprocess.run(["pkg-config", *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.split()


def project_version():
    with open(os.path.join(TOP, "CMakeLists.txt")) as f:
        return re.search(r"project\(redlockc VERSION ([0-9.]+)", f.read()).group(1)


def link_mode():
    mode = os.environ.get("REDLOCKC_LINK", "auto")
    if mode not in ("auto", "system", "bundle"):
        raise SystemExit(f"REDLOCKC_LINK must be auto, system or bundle, not {mode!r}")
    if mode == "auto":
        mode = "system" if pkg_config("--exists", "redlockc") is not None else "bundle"
    return mode


def extension():
    if not os.path.exists(SWIG_I):
        raise SystemExit(f"no {SWIG_I}: build from a checkout of libredlockc "
                         "(or set REDLOCKC_SOURCE_DIR to one)")
    mode = link_mode()
    print(f"redlockc: libredlockc is linked as REDLOCKC_LINK={mode}")
    kw = {"sources": [SWIG_I], "include_dirs": [], "library_dirs": [], "libraries": [],
          "runtime_library_dirs": [], "define_macros": [], "extra_compile_args": [],
          "extra_link_args": []}
    if mode == "system":
        cflags = pkg_config("--cflags", "redlockc")
        libdir = pkg_config("--variable=libdir", "redlockc")
        if cflags is None or not libdir:
            raise SystemExit("REDLOCKC_LINK=system: pkg-config does not find redlockc "
                             "(install libredlockc-dev, or set PKG_CONFIG_PATH)")
        kw["include_dirs"] += [f[2:] for f in cflags if f.startswith("-I")]
        kw["library_dirs"].append(libdir[0])
        kw["libraries"].append("redlockc")
        if os.path.realpath(libdir[0]) not in SYSTEM_LIBDIRS:
            kw["runtime_library_dirs"].append(libdir[0])
        kw["include_dirs"].append(INCLUDE)  # after the installed header
    else:
        hiredis = pkg_config("--cflags", "--libs", "hiredis")
        if hiredis is None:
            raise SystemExit("REDLOCKC_LINK=bundle needs hiredis (Debian: libhiredis-dev)")
        # The blocking API's TLS (c/src/blocking/tls.c).
        openssl = pkg_config("--cflags", "--libs", "libssl", "libcrypto")
        if openssl is None:
            raise SystemExit("REDLOCKC_LINK=bundle needs OpenSSL (Debian: libssl-dev)")
        hiredis += openssl
        kw["sources"] += sorted(glob.glob(os.path.join(TOP, "c", "src", "**", "*.c"), recursive=True))
        kw["include_dirs"] += [INCLUDE] + [os.path.join(TOP, "c", "src", d) for d in ("engine", "blocking", "family")]
        kw["include_dirs"] += [f[2:] for f in hiredis if f.startswith("-I")]
        kw["library_dirs"] += [f[2:] for f in hiredis if f.startswith("-L")]
        kw["libraries"] += [f[2:] for f in hiredis if f.startswith("-l")] + ["m"]
        kw["define_macros"] += [("RLC_VERSION_STRING", f'"{project_version()}"'),
                                ("_GNU_SOURCE", None), ("RLC_API", "")]
        kw["extra_compile_args"] += ["-std=gnu11", "-fvisibility=hidden", "-pthread"]
        kw["extra_link_args"] += ["-pthread"]
    return Extension("redlockc._redlockc_core", **kw)


class BuildExt(build_ext):
    """setuptools' SWIG step, with its outputs where they belong: the C
    wrapper in the build's temporary directory (not beside redlockc.i in the
    checkout) and redlockc_core.py inside the built package."""

    def finalize_options(self):
        super().finalize_options()
        # pip builds a local folder in place: bindings/python/build/ may hold
        # a module built by an earlier run with the other REDLOCKC_LINK, which
        # setuptools would take as up to date.
        self.force = True

    def swig_sources(self, sources, extension):
        out = []
        for source in sources:
            if not source.endswith(".i"):
                out.append(source)
                continue
            os.makedirs(self.build_temp, exist_ok=True)
            package_dir = os.path.join(HERE if self.inplace else self.build_lib, "redlockc")
            os.makedirs(package_dir, exist_ok=True)
            wrap = os.path.join(self.build_temp, "redlockc_corePYTHON_wrap.c")
            self.spawn([self.swig or "swig", "-python", "-threads", "-fastproxy",
                        *[f"-I{d}" for d in extension.include_dirs],
                        "-outdir", package_dir, "-o", wrap, source])
            out.append(wrap)
        return out

    def build_extensions(self):
        # The bundled library's symbols stay inside the module: only
        # PyInit__redlockc_core is exported (a libredlockc.so.1 loaded by
        # something else in the process is never mixed up with this copy).
        script = os.path.join(tempfile.mkdtemp(prefix="redlockc-"), "module.map")
        with open(script, "w") as f:
            f.write("{ global: PyInit__redlockc_core; local: *; };\n")
        for ext in self.extensions:
            ext.extra_link_args.append(f"-Wl,--version-script={script}")
        super().build_extensions()


setup(version=project_version(), ext_modules=[extension()], cmdclass={"build_ext": BuildExt})
