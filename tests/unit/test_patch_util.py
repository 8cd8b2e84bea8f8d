"""patch._util: idempotent method wrapping and post-import hooks."""

from __future__ import annotations

import sys
import uuid

import pytest

from vllm_spec_plugins.patch import _util
from vllm_spec_plugins.patch._util import MARK, is_patched, unwrap_method, when_imported, wrap_method


class Base:
    def greet(self, who):
        """Say hello."""
        return f"hello {who}"


def loud(original):
    def greet(self, who):
        return original(self, who).upper()

    return greet


@pytest.fixture
def Target():
    class Target(Base):
        def greet(self, who):
            """Say hi."""
            return f"hi {who}"

    return Target


def test_wrap_once(Target):
    original = Target.__dict__["greet"]
    assert wrap_method(Target, "greet", loud) is True
    wrapped = Target.__dict__["greet"]
    assert wrapped is not original
    assert getattr(wrapped, MARK) is True and is_patched(wrapped)
    assert wrapped.__wrapped__ is original
    assert wrapped.__doc__ == "Say hi."  # functools.update_wrapper
    assert Target().greet("bob") == "HI BOB"
    # the second call sees the marker and does nothing
    calls = []
    assert wrap_method(Target, "greet", lambda orig: calls.append(orig) or loud(orig)) is False
    assert calls == []
    assert Target.__dict__["greet"] is wrapped
    assert Target().greet("bob") == "HI BOB"
    assert not is_patched(original)


def test_unwrap(Target):
    original = Target.__dict__["greet"]
    wrap_method(Target, "greet", loud)
    unwrap_method(Target, "greet")
    assert Target.__dict__["greet"] is original
    assert Target().greet("ann") == "hi ann"
    unwrap_method(Target, "greet")  # not patched: no-op
    assert Target.__dict__["greet"] is original
    unwrap_method(Target, "does_not_exist")  # no-op
    # wrapping again works after unwrapping
    assert wrap_method(Target, "greet", loud) is True
    assert Target().greet("ann") == "HI ANN"


def test_wrap_inherited_method():
    class Child(Base):
        pass

    assert "greet" not in Child.__dict__
    assert wrap_method(Child, "greet", loud) is True
    assert Child().greet("x") == "HELLO X"
    assert Base().greet("x") == "hello x"  # the base class is untouched
    assert Child.__dict__["greet"].__wrapped__ is Base.__dict__["greet"]
    unwrap_method(Child, "greet")
    assert Child().greet("x") == "hello x"


# -- when_imported -------------------------------------------------------------


def test_when_imported_fires_now_for_imported_module():
    seen = []
    import json

    when_imported("json", seen.append)
    assert seen == [json]
    assert "json" not in _util._after_import


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    name = f"vsp_tmp_mod_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text("VALUE = 41\nVALUE += 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    _util._after_import.pop(name, None)


def test_when_imported_fires_after_import(fresh_module):
    import importlib

    seen = []
    when_imported(fresh_module, lambda m: seen.append((m, m.VALUE)))
    when_imported(fresh_module, lambda m: seen.append("second"))
    assert seen == []
    assert fresh_module not in sys.modules
    assert fresh_module in _util._after_import
    assert _util._FINDER in sys.meta_path
    mod = importlib.import_module(fresh_module)
    # the callbacks ran once, in order, after the module body executed
    assert seen == [(mod, 42), "second"]
    assert fresh_module not in _util._after_import
    # registering after the import fires immediately
    when_imported(fresh_module, lambda m: seen.append("late"))
    assert seen[-1] == "late" and len(seen) == 3


def test_when_imported_callback_error_is_logged_not_raised(fresh_module, caplog):
    import importlib

    from .fakes import attach

    def boom(m):
        raise RuntimeError("patch failed")

    after = []
    when_imported(fresh_module, boom)
    when_imported(fresh_module, after.append)
    with attach(caplog.handler, "vllm.spec_plugins"):
        mod = importlib.import_module(fresh_module)
    assert mod.VALUE == 42
    assert after == [mod]  # a failing callback does not stop the others
    assert any(f"patching {fresh_module} failed" in r.getMessage() for r in caplog.records)
