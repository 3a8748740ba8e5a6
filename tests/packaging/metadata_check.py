"""Every package's metadata agrees with LICENSE and with the one version.

    RLC_BUILD_DIR=build /usr/bin/python3 tests/packaging/metadata_check.py

The version has one source, `project(redlockc VERSION x.y.z)` in
CMakeLists.txt. The build takes it from there (rlc_version(), the .so's real
name, redlockc.pc, redlockcConfigVersion.cmake, the Debian packages), and so
does setup.py (the Python package); package.json and its lock, the gemspec,
the rockspec and the Lua modules' _VERSION carry it written out. Checks:
- LICENSE is MIT for "libredlockc authors", and the packages' copies are it;
- each artifact above says the version: the built library and CMake package
  file and CPack's configuration in RLC_BUILD_DIR (default build/, configured
  and built), the gemspec evaluated by Ruby, the files' own fields;
- CHANGELOG.md has an Unreleased section and one for the version;
- README.md and docs/ name no other version of an artifact (redlockc-x.y.z,
  libredlockc.so.x.y.z); the binding READMEs' mentions are shown as notes;
- the Debian metadata: a maintainer that is not a local or example address,
  a homepage, descriptions that reach CPack intact (no list separator or
  unbalanced quote left by broken quoting) with a synopsis of at most 80
  characters;
- READMEs and docs link only to files in this tree;
- no shell script under pipefail pipes into `grep -q` (see pipe_into_grep_q).
"""
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("RLC_BUILD_DIR") or os.path.join(TOP, "build")
problems = []
notes = []


def read(rel):
    with open(os.path.join(TOP, rel), encoding="utf-8") as f:
        return f.read()


def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: {got!r}, expected {want!r}")


def field(what, pattern, text, flags=0):
    m = re.search(pattern, text, flags)
    if not m:
        problems.append(f"{what}: not found (/{pattern}/)")
        return None
    return m.group(1)


version = re.search(r"^project\(redlockc VERSION ([0-9]+\.[0-9]+\.[0-9]+)",
                    read("CMakeLists.txt"), re.M).group(1)


# ---- LICENSE ------------------------------------------------------------------
def check_license():
    text = read("LICENSE")
    expect("LICENSE first line", text.splitlines()[0], "MIT License")
    if "libredlockc authors" not in text:
        problems.append("LICENSE does not name the libredlockc authors")
    for copy in ("bindings/node/LICENSE", "bindings/ruby/LICENSE"):
        if not os.path.exists(os.path.join(TOP, copy)) or read(copy) != text:
            problems.append(f"{copy} is missing or differs from LICENSE")


# ---- what the build makes --------------------------------------------------------
def cpack_values(names):
    """The values CPack will use, read back from the build's CPackConfig.cmake by
    CMake itself (so a quoting mistake shows as it reaches the packages)."""
    config = os.path.join(BUILD, "CPackConfig.cmake")
    if not os.path.exists(config):
        problems.append(f"no {config}: configure the build first (RLC_BUILD_DIR)")
        return {}
    out = tempfile.mkdtemp(prefix="rlc-meta-")
    try:
        script = os.path.join(out, "dump.cmake")
        with open(script, "w") as f:
            f.write("include(${F})\nforeach(v ${NAMES})\n"
                    '  file(WRITE "${OUT}/${v}" "${${v}}")\nendforeach()\n')
        subprocess.run(["cmake", f"-DF={config}", f"-DOUT={out}", f"-DNAMES={';'.join(names)}",
                        "-P", script], check=True, capture_output=True, text=True)
        values = {}
        for n in names:
            with open(os.path.join(out, n), encoding="utf-8") as f:
                values[n] = f.read()
        return values
    finally:
        shutil.rmtree(out)


def check_build():
    lib = os.path.join(BUILD, "c", "libredlockc.so.1")
    if not os.path.exists(lib):
        problems.append(f"no {lib}: build first (RLC_BUILD_DIR)")
    else:
        so = ctypes.CDLL(lib)
        so.rlc_version.restype = ctypes.c_char_p
        expect("rlc_version() of the built library", so.rlc_version().decode(), version)
        expect("the library's real file", os.path.basename(os.path.realpath(lib)),
               f"libredlockc.so.{version}")
    cv = os.path.join(BUILD, "packaging", "redlockcConfigVersion.cmake")
    if os.path.exists(cv):
        with open(cv, encoding="utf-8") as f:
            expect("redlockcConfigVersion.cmake", field(cv, r'set\(PACKAGE_VERSION "([^"]+)"\)',
                                                        f.read()), version)
    else:
        problems.append(f"no {cv}")


DEB_COMPONENTS = ("RUNTIME", "DEV", "TOOLS", "PYTHON", "LUA")
# Addresses that say nobody: local machines and the names kept for examples and
# tests (RFC 2606). The reserved .invalid is allowed: it names no one by mistake.
PLACEHOLDER_MAIL = re.compile(r"@(localhost|[^>]*\.(local|localdomain|test|example)|"
                              r"(.*\.)?example\.(com|org|net))>$", re.I)


def check_debian():
    names = ["CPACK_PACKAGE_VERSION", "CPACK_PACKAGE_CONTACT", "CPACK_DEBIAN_PACKAGE_HOMEPAGE",
             "CPACK_PACKAGE_DESCRIPTION_SUMMARY"] + \
        [f"CPACK_DEBIAN_{c}_DESCRIPTION" for c in DEB_COMPONENTS]
    # CPack puts a summary other than its default before each package's own
    # synopsis ("distributed locks on Redis\n distributed locks on Redis - ...").
    v = cpack_values(names)
    if not v:
        return
    expect("Debian packages' version (CPACK_PACKAGE_VERSION)", v["CPACK_PACKAGE_VERSION"], version)
    maint = v["CPACK_PACKAGE_CONTACT"]
    if PLACEHOLDER_MAIL.search(maint) or re.search(r"todo|changeme|your[ _-]?name", maint, re.I):
        problems.append(f"Debian Maintainer {maint!r} is a placeholder")
    elif not re.fullmatch(r"[^<>@]*[A-Za-z][^<>@]* <[^<>@\s]+@[^<>@\s]+\.[A-Za-z]+>", maint):
        problems.append(f"Debian Maintainer {maint!r} is not 'Name <address>'")
    if not re.fullmatch(r"https://\S+", v["CPACK_DEBIAN_PACKAGE_HOMEPAGE"]):
        problems.append(f"Debian Homepage {v['CPACK_DEBIAN_PACKAGE_HOMEPAGE']!r} is not a URL")
    if v["CPACK_PACKAGE_DESCRIPTION_SUMMARY"] != "redlockc built using CMake":
        problems.append("CPACK_PACKAGE_DESCRIPTION_SUMMARY is set: CPack would put it before "
                        "each package's own synopsis")
    for name in names[4:]:
        text = v[name]
        lines = text.split("\n")
        if not text.strip():
            problems.append(f"{name} is empty")
        elif ";" in text:
            problems.append(f"{name} holds ';' (a quoted word split into a list?): {text!r}")
        elif text.count('"') % 2:
            problems.append(f"{name} has an unbalanced double quote: {text!r}")
        elif len(lines[0]) > 80:
            problems.append(f"{name}: synopsis longer than 80 characters: {lines[0]!r}")
        elif len(lines) < 2:
            problems.append(f"{name} has no extended description")


# ---- the packages' own files ------------------------------------------------------
def check_node():
    pkg = json.loads(read("bindings/node/package.json"))
    expect("package.json version", pkg.get("version"), version)
    expect("package.json license", pkg.get("license"), "MIT")
    if "LICENSE" not in pkg.get("files", []):
        problems.append("package.json files does not ship LICENSE")
    if os.path.exists(os.path.join(TOP, "bindings/node/package-lock.json")):
        lock = json.loads(read("bindings/node/package-lock.json"))
        expect("package-lock.json version", lock.get("version"), version)
        expect("package-lock.json packages[''].version",
               lock.get("packages", {}).get("", {}).get("version"), version)


def check_ruby():
    gemspec = read("bindings/ruby/redlockc.gemspec")
    expect("gemspec license", field("gemspec license", r's\.license = "([^"]+)"', gemspec), "MIT")
    ruby = shutil.which("ruby")
    if not ruby:
        problems.append("ruby is not installed: the gemspec's version cannot be evaluated")
        return
    done = subprocess.run([ruby, "-e", 'print Gem::Specification.load(ARGV[0]).version',
                           os.path.join(TOP, "bindings/ruby/redlockc.gemspec")],
                          capture_output=True, text=True, cwd="/")
    expect("gemspec version (evaluated by ruby)", done.stdout.strip() or done.stderr.strip(),
           version)


def check_python():
    pyproject = read("bindings/python/pyproject.toml")
    expect("pyproject license",
           field("pyproject license", r'^license = \{ text = "([^"]+)" \}', pyproject, re.M), "MIT")
    static = re.search(r'^version = "([^"]+)"', pyproject, re.M)
    if static:
        expect("pyproject version", static.group(1), version)
        return
    # The version is dynamic: setup.py gives setup() the CMake project version.
    dynamic = re.search(r"^dynamic = \[([^\]]*)\]", pyproject, re.M)
    if not dynamic or '"version"' not in dynamic.group(1):
        problems.append("pyproject.toml has neither a version nor 'version' in dynamic")
    setup = read("bindings/python/setup.py")
    if not re.search(r"setup\([^)]*version=project_version\(\)", setup) or \
            "project(redlockc VERSION" not in setup.replace("\\", ""):
        problems.append("setup.py does not pass version=project_version() read from CMakeLists.txt")


def check_lua():
    specs = sorted(glob.glob(os.path.join(TOP, "packaging", "redlockc-*.rockspec")))
    expect("rockspecs", [os.path.relpath(s, TOP) for s in specs],
           [f"packaging/redlockc-{version}-1.rockspec"])
    for spec in specs:
        rock = read(os.path.relpath(spec, TOP))
        expect(f"{os.path.basename(spec)} version",
               field("rockspec version", r'^version = "([^"]+)"', rock, re.M), f"{version}-1")
        expect("rockspec license", field("rockspec license", r'license = "([^"]+)"', rock), "MIT")
    for lua in ("bindings/lua/redlockc.lua", "bindings/luajit/resty/redlockc.lua",
                "bindings/luajit/resty/redlockc/blocking.lua"):
        expect(f"{lua} _VERSION", field(lua, r'_VERSION = "([^"]+)"', read(lua)), version)
    deb = read("packaging/deb.cmake")
    if "RENAME copyright" not in deb or "CPACK_RESOURCE_FILE_LICENSE" not in deb:
        problems.append("packaging/deb.cmake does not install LICENSE as each package's copyright")


# ---- CHANGELOG and docs -----------------------------------------------------------
def check_changelog():
    if not os.path.exists(os.path.join(TOP, "CHANGELOG.md")):
        problems.append("no CHANGELOG.md")
        return
    heads = re.findall(r"^## \[([^\]]+)\]", read("CHANGELOG.md"), re.M)
    if not heads or heads[0] != "Unreleased":
        problems.append(f"CHANGELOG.md: the first section is not [Unreleased]: {heads[:1]}")
    if version not in heads:
        problems.append(f"CHANGELOG.md has no section for {version}")


ARTIFACT_VERSION = re.compile(r"(?:redlockc-|libredlockc\.so\.|libredlockc1?_)([0-9]+\.[0-9]+\.[0-9]+)")


def check_version_mentions():
    docs = ["README.md"] + sorted(os.path.relpath(p, TOP)
                                  for p in glob.glob(os.path.join(TOP, "docs", "*.md")))
    for doc in docs:
        for n, line in enumerate(read(doc).splitlines(), 1):
            for got in ARTIFACT_VERSION.findall(line):
                expect(f"{doc}:{n} names version", got, version)
    for doc in sorted(glob.glob(os.path.join(TOP, "bindings", "*", "README.md"))):
        rel = os.path.relpath(doc, TOP)
        for n, line in enumerate(read(rel).splitlines(), 1):
            for got in ARTIFACT_VERSION.findall(line):
                if got != version:
                    notes.append(f"{rel}:{n} names version {got} (the project is {version})")


def check_links():
    # The READMEs and docs link only to files in this tree (no ../shared, no
    # DESIGN.md that is not here), and every relative link resolves.
    docs = ["README.md", "CHANGELOG.md", "docs/RUNTIMES.md", "docs/SECURITY.md",
            "docs/DESIGN.md", "docs/FAMILY.md"] + \
        [f"bindings/{b}/README.md" for b in ("python", "node", "go", "ruby", "lua", "luajit")]
    for doc in docs:
        if not os.path.exists(os.path.join(TOP, doc)):
            problems.append(f"{doc} is missing")
            continue
        text = read(doc)
        if "../shared" in text:
            problems.append(f"{doc} refers to ../shared, outside the tree")
        # Code is not a link: `logger[level](message)` names no file.
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(TOP, os.path.dirname(doc), target))
            if not path.startswith(TOP + os.sep) or not os.path.exists(path):
                problems.append(f"{doc}: link to {target} does not resolve inside the tree")
    readme = read("README.md")
    for b in ("python", "node", "go", "ruby", "lua", "luajit"):
        if f"bindings/{b}/README.md" not in readme:
            problems.append(f"README.md does not link bindings/{b}/README.md")
    for target in ("docs/FAMILY.md", "CHANGELOG.md"):
        if f"]({target}" not in readme:
            problems.append(f"README.md does not link {target}")
    if "## Decisions (from version 1)" not in read("docs/DESIGN.md"):
        problems.append("docs/DESIGN.md has no '## Decisions (from version 1)' section")


# ---- shell scripts -----------------------------------------------------------------
# Under `set -o pipefail` a pipeline fails when any command in it fails, and
# `cmd | grep -q X` makes cmd fail whenever grep finds X before cmd has written
# everything: grep exits, cmd's next write gets SIGPIPE. The check then says
# "not found" for what was found (the lua suite's `ldd | grep -q` failed 2 runs
# in 3). Capture the output first: `grep -q X <<<"$(cmd)"`.
SHELL_DIRS = ("tests", "scripts", ".ci", "packaging", "bindings", "c")
PIPE_GREP_Q = re.compile(r"(?<![|>])\|(?![|])\s*(?:\\\n\s*)?[ef]?grep(?:\s+-[A-Za-z0-9]+)*?"
                         r"\s+(?:-[A-Za-z]*q[A-Za-z]*|--quiet|--silent)\b")


def shell_scripts():
    for d in SHELL_DIRS:
        for root, dirs, files in os.walk(os.path.join(TOP, d)):
            dirs[:] = [x for x in dirs if x not in ("node_modules", ".git") and
                       not x.startswith("build")]
            for name in files:
                path = os.path.join(root, name)
                if name.endswith(".sh"):
                    yield path
                elif "." not in name and os.path.getsize(path) < 1_000_000:
                    with open(path, "rb") as f:
                        if re.match(rb"#!.*\b(ba)?sh\b", f.readline()):
                            yield path


def pipe_into_grep_q():
    scripts = {p: open(p, encoding="utf-8", errors="replace").read() for p in shell_scripts()}
    strict = {p for p, text in scripts.items() if re.search(r"^[^#\n]*pipefail", text, re.M)}
    # A file sourced by a pipefail script runs under pipefail too.
    for p in list(strict):
        for src in re.findall(r"^\s*(?:source|\.)\s+\S*?([\w.-]+\.sh)\b", scripts[p], re.M):
            strict |= {q for q in scripts if os.path.basename(q) == src}
    for p in sorted(strict):
        text = re.sub(r"(^|\s)#.*$", r"\1", scripts[p], flags=re.M)  # comments
        for m in PIPE_GREP_Q.finditer(text):
            n = text.count("\n", 0, m.start()) + 1
            problems.append(f"{os.path.relpath(p, TOP)}:{n} pipes into grep -q under pipefail "
                            f"(capture the output first: grep -q X <<<\"$(cmd)\")")
    return len(strict)


check_license()
check_build()
check_debian()
check_node()
check_ruby()
check_python()
check_lua()
check_changelog()
check_version_mentions()
check_links()
n_strict = pipe_into_grep_q()

for n in notes:
    print("metadata: note:", n, file=sys.stderr)
for p in problems:
    print("metadata:", p, file=sys.stderr)
print(f"metadata: version {version} (CMakeLists.txt), MIT, Debian fields, "
      f"{n_strict} pipefail scripts: {'ok' if not problems else f'{len(problems)} problems'}")
sys.exit(1 if problems else 0)
