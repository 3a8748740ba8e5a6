"""Every package's metadata agrees with LICENSE and with the CMake project version.

    /usr/bin/python3 tests/packaging/metadata_check.py

Checks: LICENSE is MIT for "libredlockc authors"; the copies shipped inside
the Node, Ruby and Python packages are the same file; package.json, the
gemspec, pyproject.toml, the rockspec, the Lua modules' _VERSION and the
Debian packages' copyright file say MIT and the project's version.
"""
import json
import os
import re
import sys

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
problems = []


def read(rel):
    with open(os.path.join(TOP, rel), encoding="utf-8") as f:
        return f.read()


def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: {got!r}, expected {want!r}")


version = re.search(r"project\(redlockc VERSION ([0-9.]+)", read("CMakeLists.txt")).group(1)
license_text = read("LICENSE")
expect("LICENSE first line", license_text.splitlines()[0], "MIT License")
if "libredlockc authors" not in license_text:
    problems.append("LICENSE does not name the libredlockc authors")
for copy in ("bindings/node/LICENSE", "bindings/ruby/LICENSE"):
    if not os.path.exists(os.path.join(TOP, copy)) or read(copy) != license_text:
        problems.append(f"{copy} is missing or differs from LICENSE")

pkg = json.loads(read("bindings/node/package.json"))
expect("package.json version", pkg.get("version"), version)
expect("package.json license", pkg.get("license"), "MIT")
if "LICENSE" not in pkg.get("files", []):
    problems.append("package.json files does not ship LICENSE")

gemspec = read("bindings/ruby/redlockc.gemspec")
expect("gemspec version", re.search(r's\.version = "([^"]+)"', gemspec).group(1), version)
expect("gemspec license", re.search(r's\.license = "([^"]+)"', gemspec).group(1), "MIT")

pyproject = read("bindings/python/pyproject.toml")
expect("pyproject version", re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1), version)
expect("pyproject license", re.search(r'^license = \{ text = "([^"]+)" \}', pyproject, re.M).group(1),
       "MIT")

rockspec_name = f"packaging/redlockc-{version}-1.rockspec"
if not os.path.exists(os.path.join(TOP, rockspec_name)):
    problems.append(f"no {rockspec_name}")
else:
    rock = read(rockspec_name)
    expect("rockspec version", re.search(r'^version = "([^"]+)"', rock, re.M).group(1), f"{version}-1")
    expect("rockspec license", re.search(r'license = "([^"]+)"', rock).group(1), "MIT")
for lua in ("bindings/lua/redlockc.lua", "bindings/luajit/resty/redlockc.lua"):
    expect(f"{lua} _VERSION", re.search(r'_VERSION = "([^"]+)"', read(lua)).group(1), version)

deb = read("packaging/deb.cmake")
if "RENAME copyright" not in deb or "CPACK_RESOURCE_FILE_LICENSE" not in deb:
    problems.append("packaging/deb.cmake does not install LICENSE as each package's copyright")

# The READMEs and docs link only to files in this tree (no ../shared, no
# DESIGN.md that is not here), and every relative link resolves.
docs = ["README.md", "docs/RUNTIMES.md", "docs/SECURITY.md", "docs/DESIGN.md"] + \
    [f"bindings/{b}/README.md" for b in ("python", "node", "go", "ruby", "lua", "luajit")]
for doc in docs:
    if not os.path.exists(os.path.join(TOP, doc)):
        problems.append(f"{doc} is missing")
        continue
    text = read(doc)
    if "../shared" in text:
        problems.append(f"{doc} refers to ../shared, outside the tree")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path = os.path.normpath(os.path.join(TOP, os.path.dirname(doc), target))
        if not path.startswith(TOP + os.sep) or not os.path.exists(path):
            problems.append(f"{doc}: link to {target} does not resolve inside the tree")
readme = read("README.md")
for b in ("python", "node", "go", "ruby", "lua", "luajit"):
    if f"bindings/{b}/README.md" not in readme:
        problems.append(f"README.md does not link bindings/{b}/README.md")
if "## Decisions (from version 1)" not in read("docs/DESIGN.md"):
    problems.append("docs/DESIGN.md has no '## Decisions (from version 1)' section")

for p in problems:
    print("metadata:", p, file=sys.stderr)
print(f"metadata: version {version}, MIT: {'ok' if not problems else f'{len(problems)} problems'}")
sys.exit(1 if problems else 0)
