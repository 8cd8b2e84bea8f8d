"""Names vLLM or Transformers already serve: plugins never register over them.

A plugin's draft model class is registered with vLLM under a private name of its own
(:func:`private_arch`, e.g. ``MedusaModel__vsp_medusa``), and the shim points a selected
draft's config at that name (:func:`vllm_spec_plugins.routing.finalize_spec`).
Only architecture names neither vLLM nor Transformers knows are also registered under
their own name (vLLM must resolve them when it first reads the draft config). So no
plugin replaces a vLLM class, for targets or drafts.

Which drafts a plugin is *selected* for, by name alone:

* a name no one else serves (``EchoDrafter``): selected by it;
* a name of one of vLLM's own **draft** classes (``MedusaModel``, ``EagleLlamaForCausalLM``,
  ``Eagle3LlamaForCausalLM``...): selected by it; the plugin serves such drafts in place
  of vLLM's built-in drafter (``VLLM_SPEC_PLUGINS`` excluding the plugin gives them back
  to vLLM);
* a name vLLM or Transformers serve as a **model** (``LlamaForCausalLM``, model type
  ``llama``): never by the name alone (a plain draft LM of that architecture stays vLLM's
  ``draft_model``); only through ``"method": "<plugin>"`` or the checkpoint's own stamp
  ``"vllm_spec_plugin": "<plugin>"`` in ``config.json``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .api import Drafter
from .checkpoint import split_class_path

SEP = "__vsp_"


def private_arch(arch: str, plugin: str) -> str:
    """The name a plugin drafter's model class is registered under with vLLM."""
    return f"{arch}{SEP}{plugin}"


@dataclass(frozen=True)
class Shadow:
    """A name a plugin claims that vLLM or Transformers already serve."""

    what: str  # "architecture" | "model_type"
    key: str
    drafter: Drafter
    owner: str  # "vLLM" | "Transformers"
    draft: bool  # one of vLLM's own draft classes / draft config types

    @property
    def ckey(self) -> str:
        return f"{self.what}:{self.key}"

    @property
    def selectable(self) -> bool:
        return self.draft

    def describe(self) -> str:
        d = self.drafter
        if self.draft:
            return (f"{self.what} {self.key!r} (plugin {d.plugin!r}, {d.display_dist}) is also one of {self.owner}'s "
                    f"built-in drafts: not registered over it; drafts of that kind are served by the plugin "
                    f"(set VLLM_SPEC_PLUGINS to exclude {d.plugin!r} to use {self.owner}'s)")
        return (f"{self.what} {self.key!r} (plugin {d.plugin!r}, {d.display_dist}) is a model {self.owner} already "
                f"serves: not registered over it, and not selected by that name; select the plugin with "
                f"\"method\": \"{d.plugin}\" or \"vllm_spec_plugin\": \"{d.plugin}\" in the draft's config.json")


def _vllm_source(rel: str) -> Any:
    """The AST of a module of the installed vLLM, read without importing vLLM (``None`` if not found)."""
    import ast
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("vllm")  # finds the package; does not run vllm/__init__.py
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return ast.parse(f.read())
    return None


def _module_literals(tree: Any) -> dict[str, Any]:
    import ast

    out = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and node.value is not None:
            out[target.id] = node.value
    return out


def vllm_archs_from_source() -> tuple[set[str], set[str]] | None:
    """What :func:`_vllm_archs` returns, read from the installed vLLM's ``registry.py`` without importing
    vLLM (seconds faster: ``vllm-spec-plugins list``). ``None`` when the layout is not the one expected."""
    import ast

    tree = _vllm_source(os.path.join("model_executor", "models", "registry.py"))
    if tree is None:
        return None
    lit = _module_literals(tree)
    union = lit.get("_VLLM_MODELS")
    if not isinstance(union, ast.Dict):
        return None

    def keys(node: Any) -> set[str]:
        if not isinstance(node, ast.Dict):
            return set()
        out = set()
        for k, v in zip(node.keys, node.values):
            if k is None and isinstance(v, ast.Name):  # **_OTHER_MODELS
                out |= keys(lit.get(v.id))
            elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.add(k.value)
        return out

    known = keys(union)
    return (known, keys(lit.get("_SPECULATIVE_DECODING_MODELS"))) if known else None


def _vllm_archs() -> tuple[set[str], set[str]]:
    """(every architecture vLLM's registry knows, those of its own draft classes), minus plugin registrations.

    From the live registry when vLLM is imported already (an engine process: it also holds other plugins'
    registrations), else from the registry's source (the CLI never pays for importing vLLM)."""
    import sys

    if "vllm.model_executor.models.registry" not in sys.modules:
        found = vllm_archs_from_source()
        if found is not None:
            return found
    try:
        from vllm.model_executor.models import registry as reg
    except Exception:  # noqa: BLE001 - no vLLM: nothing known
        return set(), set()
    known: set[str] = set()
    for arch in reg.ModelRegistry.models:
        if SEP in arch:
            continue
        known.add(arch)
    drafts = set(getattr(reg, "_SPECULATIVE_DECODING_MODELS", {}) or {})
    return known, drafts


def _our_registrations(drafters: Iterable[Drafter]) -> set[str]:
    """Architecture names whose vLLM registration points at a plugin's own class (registered by us)."""
    import sys

    if "vllm.model_executor.models.registry" not in sys.modules:
        return set()  # nothing registered in this process
    try:
        from vllm.model_executor.models import registry as reg
    except Exception:  # noqa: BLE001
        return set()
    ours = set()
    for d in drafters:
        mod, cls = split_class_path(d.model_class)
        for a in d.architectures:
            m = reg.ModelRegistry.models.get(a)
            if m is not None and getattr(m, "module_name", None) == mod and getattr(m, "class_name", None) == cls:
                ours.add(a)
    return ours


def _transformers_archs() -> set[str]:
    try:
        import transformers
    except Exception:  # noqa: BLE001
        return set()
    names = getattr(transformers, "_class_to_module", None)
    if isinstance(names, dict):
        return set(names)
    return set()


def _transformers_model_types() -> set[str]:
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except Exception:  # noqa: BLE001
        return set()
    return set(CONFIG_MAPPING_NAMES)


def _vllm_draft_model_types() -> set[str]:
    import ast
    import sys

    if "vllm.transformers_utils.config" not in sys.modules:
        tree = _vllm_source(os.path.join("transformers_utils", "config.py"))
        node = _module_literals(tree).get("_SPECULATIVE_DECODING_CONFIGS") if tree is not None else None
        if isinstance(node, ast.Set):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    try:
        from vllm.transformers_utils.config import _SPECULATIVE_DECODING_CONFIGS
    except Exception:  # noqa: BLE001
        return set()
    return set(_SPECULATIVE_DECODING_CONFIGS)


def find_shadows(drafters: Iterable[Drafter]) -> list[Shadow]:
    """Every name the drafters claim that vLLM or Transformers already serve."""
    drafters = list(drafters)
    vllm_known, vllm_drafts = _vllm_archs()
    vllm_known -= _our_registrations(drafters)
    tf_archs = _transformers_archs()
    tf_types = _transformers_model_types()
    vllm_types = _vllm_draft_model_types()
    out: list[Shadow] = []
    for d in drafters:
        for a in d.architectures:
            if a in vllm_known:
                out.append(Shadow("architecture", a, d, "vLLM", a in vllm_drafts))
            elif a in tf_archs:
                out.append(Shadow("architecture", a, d, "Transformers", False))
        mt = d.model_type
        if mt and mt in tf_types:
            out.append(Shadow("model_type", mt, d, "Transformers", False))
        elif mt and mt in vllm_types:
            out.append(Shadow("model_type", mt, d, "vLLM", True))
    return out


def own_names(drafter: Drafter, shadows: Iterable[Shadow]) -> list[str]:
    """The drafter's architecture names that no one else serves (registered under their own name too)."""
    taken = {s.key for s in shadows if s.what == "architecture" and s.drafter is drafter}
    return [a for a in drafter.architectures if a not in taken]


def describe_all(shadows: Iterable[Shadow]) -> list[str]:
    return [s.describe() for s in shadows]


def as_dict(s: Shadow) -> dict[str, Any]:
    return {"what": s.what, "name": s.key, "plugin": s.drafter.plugin, "owner": s.owner,
            "selected_by_name": s.selectable}
