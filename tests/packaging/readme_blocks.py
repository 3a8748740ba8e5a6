"""Prints the code block that follows `<!-- example: NAME` in a README.

    python3 tests/packaging/readme_blocks.py README.md NAME > file

The packaging test runs each binding's README example through this, so the
example in the docs is the program that was run: they cannot drift apart.
Exits 1 (saying so) when the marker or its block is missing.
"""
import re
import sys


def block(text, name):
    marker = re.search(r"<!-- example: " + re.escape(name) + r"\b[^>]*-->\s*\n```[a-z]*\n", text)
    if not marker:
        return None
    end = text.find("\n```", marker.end() - 1)
    return None if end < 0 else text[marker.end():end + 1]


def main():
    path, name = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        code = block(f.read(), name)
    if code is None:
        sys.exit(f"{path}: no code block after <!-- example: {name} -->")
    sys.stdout.write(code)


if __name__ == "__main__":
    main()
