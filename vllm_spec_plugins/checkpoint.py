"""Reading what a plugin and a checkpoint say: class paths, ``config.json``, sizes, tensor names.

One function for each, used by the engine's config phase (:mod:`.patch.config`), the
runtime (:mod:`.runtime`) and ``vllm-spec-plugins check`` (:mod:`.diagnose`). Standard
library only at import; the plugin's config class imports Transformers when it is loaded.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import struct
from typing import TYPE_CHECKING, Any

from .errors import PluginContractError

logger = logging.getLogger("vllm.spec_plugins")

if TYPE_CHECKING:
    from .api import Drafter

#: Draft hf_config attributes the shim stamps (the hf_config is pickled to every process).
#: Only the shim sets them: values read from a checkpoint's ``config.json`` are stripped
#: (:func:`strip_stamps`).
PLUGIN_ATTR = "vsp_plugin"
DIST_ATTR = "vsp_dist"
ARCH_ATTR = "vsp_architecture"
STAMP_PREFIX = "vsp_"

#: The key a checkpoint's ``config.json`` may carry to name the plugin that serves it
#: (same effect as ``"method": "<plugin>"``): ``"vllm_spec_plugin": "eagle"``. For layouts whose
#: architecture name vLLM or Transformers already serve (EAGLE-1 drafts say ``LlamaForCausalLM``).
CONFIG_STAMP = "vllm_spec_plugin"


def stamp_hash_factors(hf: Any) -> list[str]:
    """What the shim's stamps add to a speculative config's compile hash: the plugin, its distribution, the
    architecture and the target layers read (aux hidden-state outputs change the target's compiled graph)."""
    return [getattr(hf, PLUGIN_ATTR, ""), getattr(hf, DIST_ATTR, ""), getattr(hf, ARCH_ATTR, ""),
            repr(getattr(hf, "eagle_aux_hidden_state_layer_ids", None))]


def split_class_path(ref: str) -> tuple[str, str]:
    """``"package.module:Class"`` as ``(module, attribute)`` (the form of ``Drafter.model_class`` and
    ``config_class``, and of vLLM's lazy registrations)."""
    module, _, name = ref.partition(":")
    return module, name


def import_class_path(ref: str) -> Any:
    """The object a ``"module:Class"`` path names; raises what the import raises, or ``AttributeError``."""
    module, name = split_class_path(ref)
    return getattr(importlib.import_module(module), name)


def read_config(checkpoint: str) -> dict[str, Any]:
    """A local checkpoint folder's ``config.json``; raises ``FileNotFoundError`` (saying why) or the parse error."""
    path = os.path.join(checkpoint, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"'{checkpoint}' is not a local checkpoint folder with a config.json "
                                f"(check needs the files; download a hub checkpoint first)")
    with open(path) as f:
        out = json.load(f)
    return out if isinstance(out, dict) else {}


def local_config(model: str | None) -> dict[str, Any]:
    """:func:`read_config` of a local folder, or ``{}`` for a hub id, a folder without one or an unreadable
    one (vLLM's own loading reports those)."""
    if not model or not os.path.isdir(model):
        return {}
    try:
        return read_config(model)
    except (OSError, ValueError):
        return {}


def load_plugin_config(drafter: Drafter, checkpoint: str, revision: str | None = None) -> Any:
    """The draft config as the plugin reads it: its ``config_class`` (Transformers' ``AutoConfig`` when it
    has none) from ``checkpoint``."""
    kwargs = {} if revision is None else {"revision": revision}
    if drafter.config_class:
        return import_class_path(drafter.config_class).from_pretrained(checkpoint, **kwargs)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(checkpoint, **kwargs)


def in_plugin_config_class(drafter: Drafter, hf: Any, checkpoint: str, revision: str | None = None) -> Any:
    """``hf`` itself, or the draft config loaded again with the plugin's ``config_class`` when vLLM loaded it
    with another (0.32 has its own classes for ``medusa`` and ``mlp_speculator``, read before AutoConfig): the
    plugin's class wins, and an INFO line says so."""
    if not drafter.config_class:
        return hf
    cls = import_class_path(drafter.config_class)
    if isinstance(hf, cls):
        return hf
    before = f"{type(hf).__module__}.{type(hf).__qualname__}"
    out = load_plugin_config(drafter, checkpoint, revision)
    strip_stamps(out)
    logger.info("vllm_spec_plugins: draft '%s' (model_type %r): config loaded with plugin '%s' class %s instead of %s",
                checkpoint, getattr(out, "model_type", None), drafter.plugin, drafter.config_class, before)
    return out


def resolve_dim(drafter: Drafter, hf_config: Any, dim: int | str, what: str) -> int:
    """A declared size: an int as it is, a name read from the draft config (which must hold an int).

    ``what`` leads the error's words: ``"state 'acc' with dimension"``, ``"max_speculative_tokens ="``.
    """
    if isinstance(dim, int):
        return dim
    value = getattr(hf_config, dim, None)
    if not isinstance(value, int) or isinstance(value, bool):
        raise PluginContractError(
            f"vllm_spec_plugins: {drafter.culprit()} declares {what} {dim!r}, but the draft "
            f"config has {dim}={value!r} (expected an int)", plugin_name=drafter.plugin, dist=drafter.display_dist)
    return value


def resolve_shape(drafter: Drafter, hf_config: Any, shape: tuple[int | str, ...], what: str) -> tuple[int, ...]:
    """:func:`resolve_dim` of every dimension of a declared shape."""
    return tuple(resolve_dim(drafter, hf_config, dim, f"{what} with dimension") for dim in shape)


def weight_names(model: str | None) -> set[str]:
    """Tensor names of a local checkpoint's ``*.safetensors`` files (headers only; empty if none)."""
    out: set[str] = set()
    if not model or not os.path.isdir(model):
        return out
    for name in sorted(os.listdir(model)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(model, name)
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                if n > size - 8:
                    raise ValueError(f"its header says {n} bytes, the file has {size}")
                out |= {k for k in json.loads(f.read(n)) if k != "__metadata__"}
        except OSError:
            continue  # vLLM's loader reports unreadable files
        except (ValueError, struct.error, MemoryError, AttributeError, TypeError) as e:
            raise ValueError(f"vllm_spec_plugins: draft file '{path}' is not a valid safetensors file "
                             f"({type(e).__name__}: {e}). Re-download or re-save the checkpoint.") from None
    return out


def strip_stamps(hf: Any) -> list[str]:
    """Remove ``vsp_*`` attributes a checkpoint's ``config.json`` carried; only the shim sets them.

    A config saved from a plugin-served draft (``save_pretrained`` of the engine's hf_config)
    carries the shim's stamps; trusted, they would route a draft no plugin claims into plugin
    code. Returns the keys removed.
    """
    removed = []
    for obj in (hf, getattr(hf, "model", None), getattr(hf, "text_config", None)):
        if obj is None or not hasattr(obj, "__dict__"):
            continue
        for key in [k for k in vars(obj) if k.startswith(STAMP_PREFIX)]:
            delattr(obj, key)
            removed.append(key)
    return removed
