"""Fixtures for the redlockc CLI tests (see clitools.py)."""
import os

import pytest

from clitools import BUILD, CLI, Redis


@pytest.fixture(scope="module")
def redis():
    r = Redis()
    yield r
    r.stop()


@pytest.fixture
def make_redis():
    """Servers of the test's own (killed or configured by the test)."""
    made = []

    def make(*extra):
        r = Redis(*extra)
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


@pytest.fixture(scope="session")
def cli():
    assert os.access(CLI, os.X_OK), f"{CLI} is not built (RLC_BUILD_DIR={BUILD})"
    return CLI


@pytest.fixture
def name(request):
    """A lock name of this test's own."""
    return "cli-" + request.node.name.replace("[", "-").replace("]", "")
