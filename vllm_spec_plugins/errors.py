"""Errors that name the culprit: plugin, distribution and version, and what to do."""

from __future__ import annotations


class VllmSpecPluginError(Exception):
    """Base class of every error this package raises on purpose."""


class PluginLoadError(VllmSpecPluginError):
    """A plugin failed to import or to register, and its draft was requested."""

    def __init__(self, message: str, *, plugin_name: str = "", dist: str = "") -> None:
        super().__init__(message)
        self.plugin_name = plugin_name
        self.dist = dist


class PluginContractError(VllmSpecPluginError):
    """A plugin broke the contract: bad registration, unknown forward parameter, bad shape or dtype."""

    def __init__(self, message: str, *, plugin_name: str = "", dist: str = "") -> None:
        super().__init__(message)
        self.plugin_name = plugin_name
        self.dist = dist


class DuplicateArchitectureError(PluginContractError):
    """Two plugins claim the same architecture or model_type."""


class UnsupportedVllmError(VllmSpecPluginError):
    """A plugin draft was requested on a vLLM version the shim does not support."""


def culprit(plugin: str, dist: str, *, model_class: str | None = None, checkpoint: str | None = None) -> str:
    """Who an error or log line is about, written one way everywhere (pluggy's errors take the culprit as an
    argument too): ``plugin 'x' (dist 1.0)``, ``plugin 'x' (dist 1.0), model class m:C``, or with a checkpoint
    ``draft '<path>' (plugin 'x', dist 1.0, model class m:C)``."""
    if checkpoint is not None:
        inner = f"plugin {plugin!r}, {dist}" + (f", model class {model_class}" if model_class else "")
        return f"draft '{checkpoint}' ({inner})"
    return f"plugin {plugin!r} ({dist})" + (f", model class {model_class}" if model_class else "")
