"""The explanations users read when a draft cannot be served: one function per situation.

Shared by the engine (:mod:`.patch.config`, :mod:`.routing`) and ``vllm-spec-plugins check``
(:mod:`.diagnose`), so both say the same thing. Every message names the culprit (plugin,
distribution and version, checkpoint) and what to do.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING

from ._names import ENV_ALLOW
from .api import Drafter
from .checkpoint import CONFIG_STAMP, local_config, split_class_path
from .errors import PluginContractError, PluginLoadError, UnsupportedVllmError, VllmSpecPluginError

if TYPE_CHECKING:
    from .manager import PluginHost


def version_error(model: str | None, plugin: str) -> UnsupportedVllmError:
    from ._compat import supported_text, vllm_version

    return UnsupportedVllmError(
        f"vllm_spec_plugins {_our_version()} supports vLLM {supported_text()}; found {vllm_version()[0]}. "
        f"Draft '{model}' (plugin '{plugin}') cannot be served. Install a supported vLLM, or run without the draft.")


def _our_version() -> str:
    from . import __version__

    return __version__


def path_route_error(drafter: Drafter, path: str, method: str) -> PluginContractError:
    return PluginContractError(
        f"vllm_spec_plugins: draft '{path}' belongs to {drafter.culprit()}, "
        f"but vLLM picked method {method!r} from the checkpoint path (it contains "
        f"'eagle-', 'eagle3', 'dflash' or 'dspark'). Rename the checkpoint folder.",
        plugin_name=drafter.plugin, dist=drafter.display_dist)


def installed_text(host: PluginHost) -> str:
    ok = [f"{p.name} ({p.dist_label})" for p in host.plugins.values() if not p.error]
    out = "installed plugins: " + (", ".join(ok) if ok else "none")
    if host.skipped:
        out += f"; installed but excluded by {ENV_ALLOW}={os.environ.get(ENV_ALLOW, '')!r}: " + ", ".join(host.skipped)
    if host.broken:
        out += "; broken: " + ", ".join(p.name for p in host.broken)
    return out


def unknown_method_error(host: PluginHost, method: str, where: str) -> PluginLoadError:
    from .routing import vllm_methods

    if method in host.skipped:
        return PluginLoadError(
            f"vllm_spec_plugins: {where} names plugin {method!r}, which is installed but excluded by "
            f"{ENV_ALLOW}={os.environ.get(ENV_ALLOW, '')!r}. Add {method!r} to {ENV_ALLOW} (or unset it).",
            plugin_name=method)
    common = ", ".join(m for m in vllm_methods() if not m.endswith("_mtp"))
    return PluginLoadError(
        f"vllm_spec_plugins: {where} names {method!r}, which is neither an installed spec-decode plugin nor one "
        f"of vLLM's speculative methods ({installed_text(host)}). Install "
        f"the plugin that serves this draft (`vllm-spec-plugins list` shows what is installed), or use one of "
        f"vLLM's methods ({common}, and its *_mtp names).", plugin_name=method)


def no_identity_note(host: PluginHost, model: str) -> str:
    """A draft config naming neither an architecture nor a model_type (also what ``check`` says of one)."""
    typed = [f"\"model_type\": \"{d.model_type}\" (plugin {d.plugin!r}, {d.display_dist})"
             for d in host.drafters if d.model_type]
    return (f"vllm_spec_plugins: '{model}/config.json' names neither an architecture nor a model_type, so "
            f"nothing can tell which drafter serves it (old FasterDecoding Medusa configs look like this). Pass "
            f"--speculative-config '{{\"method\": \"<plugin>\", \"model\": \"{model}\", ...}}', or add "
            f"\"{CONFIG_STAMP}\": \"<plugin>\" or the model_type to that config.json"
            + (f": {', '.join(typed)}." if typed else "."))


def excluded_claim(host: PluginHost, archs: list[str], model_type: str | None) -> str:
    """A sentence when a plugin excluded by ``VLLM_SPEC_PLUGINS`` would serve this draft (else "")."""
    if not host.skipped:
        return ""
    import importlib.metadata as md

    from ._names import ENTRY_POINT_GROUP
    from .manager import PluginHost

    eps = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP) if ep.name in host.skipped]
    if not eps:
        return ""
    other = PluginHost()
    log = logging.getLogger("vllm.spec_plugins")
    level = log.level
    log.setLevel(logging.ERROR)  # the excluded plugins' own load warnings are noise here
    try:
        other.load(eps, allow=None)
        d = other.select(archs, model_type)
    except Exception:  # noqa: BLE001
        return ""
    finally:
        log.setLevel(level)
    if d is None:
        return ""
    by = f"model_type {model_type!r}" if model_type and model_type == d.model_type else f"architectures {archs}"
    return (f"vllm_spec_plugins: this draft ({by}) is served by {d.culprit()}, which "
            f"{ENV_ALLOW}={os.environ.get(ENV_ALLOW, '')!r} excludes. Add {d.plugin!r} to {ENV_ALLOW} (or unset it) "
            f"to serve it with the plugin.")


def why_config_failed(host: PluginHost, model: str | None, alias: str | None) -> str:
    """Why vLLM could not build a draft's config, when a plugin is the reason (else "")."""
    from .routing import PATH_METHODS, path_method

    local = local_config(model)
    notes = []
    try:
        d = host.select(list(local.get("architectures") or []), local.get("model_type"), alias)
    except VllmSpecPluginError as e:
        return str(e)
    from_path = path_method(model)
    if d is not None and d.kind == "heads" and alias is None and from_path in PATH_METHODS:
        # vLLM took its EAGLE route from the folder name and renamed the architecture before failing
        notes.append(str(path_route_error(d, str(model), str(from_path))))
    elif d is not None:
        mod, name = split_class_path(d.model_class)
        try:
            module = importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001
            notes.append(
                f"vllm_spec_plugins: draft '{model}' is served by {d.culprit()}, whose model "
                f"class {d.model_class!r} cannot be imported: module {mod!r} failed with {type(e).__name__}: {e}. "
                f"Reinstall or upgrade {d.display_dist}, or install what it needs.")
        else:
            if getattr(module, name, None) is None:
                notes.append(
                    f"vllm_spec_plugins: draft '{model}' is served by {d.culprit()}, which "
                    f"names model class {d.model_class!r}, but module {mod!r} has no attribute {name!r}. Fix the "
                    f"Drafter(model_class=...) of the plugin.")
    elif local:
        claim = excluded_claim(host, list(local.get("architectures") or []), local.get("model_type"))
        if claim:
            notes.append(claim)
        elif not local.get("architectures") and not local.get("model_type"):
            notes.append(no_identity_note(host, str(model)))
    broken = host.describe_broken()
    if broken and not notes:
        notes.append("vllm_spec_plugins: " + broken)
    return "\n".join(notes)
