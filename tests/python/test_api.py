"""The package's surface: names, help(), type stubs, exceptions."""
import ast
import inspect
import os
import pickle
import pydoc

import pytest

import redlockc
from redlockc import redlockc_core as core

STATUS = {
    -1: redlockc.InvalidArgument, -2: redlockc.OutOfMemoryError, -3: redlockc.ConnectionError,
    -4: redlockc.TimeoutError, -5: redlockc.NotOwnerError, -6: redlockc.LockLostError,
    -7: redlockc.NoQuorumError, -8: redlockc.ServerError, -9: redlockc.ProtocolError,
    -10: redlockc.ClosedError, -11: redlockc.AuthenticationError,
}


def test_one_exception_class_per_status_code():
    for code, cls in STATUS.items():
        assert cls.status == code and issubclass(cls, redlockc.Error), \
            f"{cls.__name__}: a redlockc.Error for status {code}"
        e = cls(code, "detail")
        phrase = core.rlc_strerror(code)
        assert e.code == code and e.detail == "detail", f"{cls.__name__}: code and detail kept"
        assert str(e) == e.message == "detail", \
            f"{cls.__name__}: the detail (the class names the status); got {str(e)!r}"
        bare = cls(code)
        assert str(bare) == bare.detail == phrase, \
            f"{cls.__name__}: no detail: the library's phrase; got {str(bare)!r}"
        copy = pickle.loads(pickle.dumps(e))
        assert type(copy) is cls and copy.code == code and str(copy) == str(e), \
            "errors survive pickling (multiprocessing)"
    for ours, builtin in ((redlockc.InvalidArgument, ValueError),
                          (redlockc.ConnectionError, ConnectionError),
                          (redlockc.TimeoutError, TimeoutError),
                          (redlockc.OutOfMemoryError, MemoryError)):
        assert issubclass(ours, builtin), f"{ours.__name__} is also a {builtin.__name__}"


def test_every_public_name_is_in_the_stub_with_its_members():
    stub_path = os.path.join(os.path.dirname(redlockc.__file__), "__init__.pyi")
    with open(stub_path) as f:
        tree = ast.parse(f.read())
    stub = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name in redlockc.__all__:
        assert name in stub, f"{name} is missing from __init__.pyi"
    for cls in (redlockc.Client, redlockc.Lock):
        public = {m for m in vars(cls) if not m.startswith("_")}
        stubbed = {n.name for n in stub[cls.__name__].body if isinstance(n, ast.FunctionDef)}
        assert public <= stubbed, f"{cls.__name__}: not in the stub: {public - stubbed}"
    assert os.path.exists(os.path.join(os.path.dirname(stub_path), "py.typed")), \
        "py.typed marks the package as typed"


def test_help_of_lock_reads_well():
    text = pydoc.render_doc(redlockc.Lock, renderer=pydoc.plaintext)
    assert "class Lock" in text and "redlockc" in text, f"help() names the class: {text[:200]}"
    assert "acquire(self, blocking=True, timeout=-1, lease=None)" in text, \
        "help() shows threading.Lock's acquire signature plus lease"
    for word in ("seconds", "watchdog", "release(self)", "on_lost(self, fn)", "hold_count",
                 "fencing_token", "validity", "ttl", "NotOwnerError", "LockLostError"):
        assert word in text, f"help(redlockc.Lock) does not mention {word!r}"
    for name, member in inspect.getmembers(redlockc.Lock):
        if not name.startswith("_"):
            assert inspect.getdoc(member), f"Lock.{name} has no docstring"
    for name, member in inspect.getmembers(redlockc.Client):
        if not name.startswith("_"):
            assert inspect.getdoc(member), f"Client.{name} has no docstring"
    assert "watchdog_timeout" in inspect.getdoc(redlockc.Client), "Client's doc lists the options"


def test_public_classes_live_in_redlockc():
    assert repr(redlockc.NotOwnerError) == "<class 'redlockc.NotOwnerError'>", \
        f"shown as redlockc.NotOwnerError, got {redlockc.NotOwnerError!r}"
    assert redlockc.Lock.__module__ == "redlockc", f"Lock lives in {redlockc.Lock.__module__}"


def test_version_is_the_librarys():
    assert redlockc.__version__ == core.rlc_version() and redlockc.__version__.count(".") == 2, \
        f"__version__ {redlockc.__version__!r} is rlc_version(), x.y.z"


def test_the_generated_layer_refuses_null_handles_without_crashing():
    with pytest.raises(redlockc.InvalidArgument, match="NULL"):
        core.rlc_lock_acquire(None, 0, 0)
    with pytest.raises(TypeError):
        core.rlc_lock_acquire("not a handle", 0, 0)
    with pytest.raises(redlockc.InvalidArgument):
        core.rlc_lock_new(None, "x", 0)
