"""PEP 517 backend of the redlockc package: setuptools' own, found offline.

pip builds in an isolated environment and would fetch setuptools and wheel
from a package index, which an offline machine does not have. Debian ships
both (python3-setuptools, python3-wheel) for its /usr/bin/python3: when they
are not importable here (an isolated build, a bare venv) their directory is
added to this build process's path only; the installed package does not
depend on them. Nothing is downloaded, ever.
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


if not (_importable("setuptools") and _importable("wheel")) and os.path.isdir(_DEBIAN):
    sys.path.append(_DEBIAN)
if not _importable("setuptools") or not _importable("wheel"):
    raise ImportError("building redlockc needs setuptools and wheel: on Debian, "
                      "apt-get install python3-setuptools python3-wheel")

from setuptools import build_meta as _meta  # noqa: E402

build_wheel = _meta.build_wheel
build_sdist = _meta.build_sdist
prepare_metadata_for_build_wheel = _meta.prepare_metadata_for_build_wheel


def get_requires_for_build_wheel(config_settings=None):
    return []  # setuptools and wheel are here already (see above)


def get_requires_for_build_sdist(config_settings=None):
    return []
