"""Makes `import redlockc.compat` work on a build tree without a copy of it.

A build whose CMake list of package files (bindings/python/CMakeLists.txt)
does not name compat.py has none: then the checkout's own files are used
(the ones the build would copy), and a line says so.
"""
import os

import redlockc  # the build tree's, from PYTHONPATH

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if not any(os.path.exists(os.path.join(d, "compat.py")) for d in redlockc.__path__):
    SOURCE = os.path.join(ROOT, "bindings", "python", "redlockc")
    print(f"compat: the build has no redlockc/compat.py; using {SOURCE}'s")
    redlockc.__path__.append(SOURCE)
