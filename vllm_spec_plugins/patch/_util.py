"""Patch helpers: idempotent method wrapping, and callbacks run right after vLLM imports a module."""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType

logger = logging.getLogger("vllm.spec_plugins")

MARK = "__vsp_patched__"

#: Every patch installed in this process, as ``(module, qualname)`` of the symbol replaced: what a test
#: holds against the manifest (:mod:`.targets`) and the registry (:mod:`vllm_spec_plugins.patch`).
APPLIED: list[tuple[str, str]] = []


def is_patched(fn: Any) -> bool:
    return bool(getattr(fn, MARK, False))


def _wrapper(original: Callable[..., Any], make: Callable[[Callable[..., Any]], Callable[..., Any]]
             ) -> Callable[..., Any] | None:
    """``make(original)``, marked and keeping ``__wrapped__``; None when ``original`` is one already."""
    if is_patched(original):
        return None
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)  # also sets __wrapped__ = original
    setattr(wrapper, MARK, True)
    return wrapper


def wrap_method(owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``owner.name`` by ``make(original)``, once.

    The wrapper carries ``__vsp_patched__ = True`` and ``__wrapped__ = original``;
    a second call sees the marker and does nothing. Returns whether it wrapped.
    """
    original = owner.__dict__.get(name)
    wrapper = _wrapper(original if original is not None else getattr(owner, name), make)
    if wrapper is None:
        return False
    setattr(owner, name, wrapper)
    APPLIED.append((owner.__module__, f"{owner.__qualname__}.{name}"))
    return True


def rebind_global(module: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace the module global ``module.name`` (a function other code looks up at call time) by
    ``make(original)``, once; marked and recorded as :func:`wrap_method` does. Returns whether it did."""
    wrapper = _wrapper(getattr(module, name), make)
    if wrapper is None:
        return False
    setattr(module, name, wrapper)
    APPLIED.append((getattr(module, "__name__", repr(module)), name))
    return True


def unwrap_method(owner: type, name: str) -> None:
    """Undo :func:`wrap_method` (used by tests)."""
    current = owner.__dict__.get(name)
    if current is not None and is_patched(current):
        setattr(owner, name, current.__wrapped__)


_after_import: dict[str, list[Callable[[Any], None]]] = {}
_after_import_lock = threading.RLock()


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a watched module has executed."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _after_import:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _run_after_import(fullname, module)

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]
        except AttributeError:  # pragma: no cover - read-only loader
            return spec
        return spec


_FINDER = _PostImportFinder()


def _run_after_import(name: str, module: Any) -> None:
    with _after_import_lock:
        callbacks = _after_import.pop(name, [])
    for cb in callbacks:
        try:
            cb(module)
        except Exception:
            logger.exception("vllm_spec_plugins: patching %s failed; plugin drafters will not work", name)


def when_imported(name: str, callback: Callable[[Any], None]) -> None:
    """Call ``callback(module)`` now if ``name`` is imported, else right after its import."""
    with _after_import_lock:
        module = sys.modules.get(name)
        if module is None:
            _after_import.setdefault(name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    try:
        callback(module)
    except Exception:
        logger.exception("vllm_spec_plugins: patching %s failed; plugin drafters will not work", name)
