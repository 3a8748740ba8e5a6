"""PEP 517 backend of the redlockc package: setuptools' own.

An isolated build (`python -m build`, `pip install ./bindings/python`)
installs setuptools and SWIG from PyPI first (pyproject.toml's `requires`).
An offline build without isolation (`pip install --no-build-isolation`)
uses the setuptools and wheel of the running Python, or else Debian's
(python3-setuptools, python3-wheel): their directory is then added to this
build process's path only; the installed package does not depend on them.
"""
import os
import sys

_DEBIAN = "/usr/lib/python3/dist-packages"


def _importable(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def _ready():
    """setuptools, and wheel too for a setuptools older than 70.1 (which
    has its bdist_wheel built in)."""
    if not _importable("setuptools"):
        return False
    import setuptools
    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1) or _importable("wheel")


if not _ready() and os.path.isdir(_DEBIAN):
    sys.path.append(_DEBIAN)
if not _ready():
    raise ImportError("building redlockc needs setuptools (and wheel before setuptools "
                      "70.1): pip's build isolation installs them, or on Debian "
                      "apt-get install python3-setuptools python3-wheel")

from setuptools import build_meta as _meta  # noqa: E402

build_wheel = _meta.build_wheel
build_sdist = _meta.build_sdist
prepare_metadata_for_build_wheel = _meta.prepare_metadata_for_build_wheel


def get_requires_for_build_wheel(config_settings=None):
    return []  # pyproject.toml's requires, or the running Python's (see above)


def get_requires_for_build_sdist(config_settings=None):
    return []
