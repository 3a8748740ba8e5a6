"""The Python side of the cross-runtime counter (the critical section is
described in counter.c), through the Lock context manager of DESIGN.md 5.
run.sh adds it only when bindings/python imports.

    python3 counter.py URI LOCK DIR ITERATIONS LABEL READY
"""
import os
import sys
import time

import redlockc


def critical(directory, label):
    """Returns True when someone else was inside."""
    inside = os.path.join(directory, "inside")
    try:
        marker = os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        marker = None
    counter = os.path.join(directory, "counter")
    try:
        with open(counter) as f:
            value = int(f.read().strip() or 0)
    except FileNotFoundError:
        value = 0
    time.sleep(0.001)
    tmp = os.path.join(directory, "counter." + label)
    with open(tmp, "w") as f:
        f.write("%d\n" % (value + 1))
    os.rename(tmp, counter)
    if marker is not None:
        os.close(marker)
        os.unlink(inside)
    return marker is None


def main():
    uri, name, directory, iterations, label, ready = sys.argv[1:7]
    client = redlockc.Client(uri)
    lock = client.lock(name)
    overlaps = errors = 0
    with open(ready, "a") as f:
        f.write("ready %s\n" % label)
    for i in range(int(iterations)):
        try:
            if not lock.acquire(timeout=60):
                raise RuntimeError("not acquired within 60 s")
            try:
                overlaps += critical(directory, label)
            finally:
                lock.release()
        except Exception as e:  # report and go on: the counter shows the rest
            print("%s: iteration %d: %r" % (label, i, e), file=sys.stderr)
            errors += 1
    print("%s iterations=%s overlaps=%d errors=%d" % (label, iterations, overlaps, errors))
    return 0 if overlaps == 0 and errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
