"""Fake entry points and plugin objects for the unit tests (no installed distribution needed)."""

from __future__ import annotations

import logging
import types
from typing import Any

from vllm_spec_plugins import Drafter, hookimpl
from vllm_spec_plugins.manager import PluginHost


class FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.metadata = {"Name": name}
        self.version = version


class FakeEntryPoint:
    """Quacks like ``importlib.metadata.EntryPoint`` (name, value, load(), dist)."""

    def __init__(self, name: str, obj: Any = None, *, value: str | None = None, error: BaseException | None = None,
                 dist: str | None = None, version: str = "1.0") -> None:
        self.name = name
        self.value = value or f"{name}_pkg"
        self._obj = obj
        self._error = error
        self.dist = FakeDist(dist or f"{name}-dist", version) if dist != "" else None
        self.loads = 0

    def load(self) -> Any:
        self.loads += 1
        if self._error is not None:
            raise self._error
        return self._obj


def plugin_registering(*drafters: Any, **attrs: Any) -> types.SimpleNamespace:
    """A module-like plugin object whose hook registers ``drafters``."""

    @hookimpl
    def vllm_spec_register_drafters(register):
        for d in drafters:
            register(d)

    return types.SimpleNamespace(vllm_spec_register_drafters=vllm_spec_register_drafters, **attrs)


def heads(arch: str = "ToyHeads", **kw: Any) -> Drafter:
    kw.setdefault("model_class", "toy_pkg.model:ToyHeads")
    return Drafter(architectures=(arch,), **kw)


def host_with(*eps: FakeEntryPoint, allow: Any = None) -> PluginHost:
    return PluginHost().load(entry_points=list(eps), allow=allow)


class attach:
    """Attach a capturing handler directly to a logger (vLLM's logging config stops propagation at 'vllm')."""

    def __init__(self, handler: logging.Handler, name: str, level: int = logging.DEBUG) -> None:
        self.handler, self.logger, self.level = handler, logging.getLogger(name), level

    def __enter__(self):
        self.old_level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(self.level)
        return self.handler

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.old_level)
