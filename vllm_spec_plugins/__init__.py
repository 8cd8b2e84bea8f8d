"""vllm-spec-plugins: pluggable speculative-decoding drafters for vLLM.

Plugin authors need only what this module exports::

    from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec, hookimpl

    @hookimpl
    def vllm_spec_register_drafters(register):
        register(Drafter(architectures=("MyDrafter",), model_class="my_pkg.model:MyDrafter"))
"""

from __future__ import annotations

import pluggy

from ._names import API_VERSION, ENTRY_POINT_GROUP, PROJECT_NAME
from .api import (
    ATTENTION_STEP_INPUTS,
    DEFAULT_INPUTS,
    STEP_INPUTS,
    AttentionDraftModel,
    Drafter,
    ExtraInput,
    HeadsDraftModel,
    PluginInfo,
    Register,
    Source,
    StateSpec,
    target_lm_head,
)
from .errors import DuplicateArchitectureError, PluginContractError, PluginLoadError, UnsupportedVllmError
from .vocab import TargetHeadRows

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marker for hook implementations in plugins."""

__all__ = [
    "API_VERSION",
    "ATTENTION_STEP_INPUTS",
    "DEFAULT_INPUTS",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "STEP_INPUTS",
    "AttentionDraftModel",
    "Drafter",
    "DuplicateArchitectureError",
    "ExtraInput",
    "HeadsDraftModel",
    "PluginContractError",
    "PluginInfo",
    "PluginLoadError",
    "Register",
    "Source",
    "StateSpec",
    "TargetHeadRows",
    "UnsupportedVllmError",
    "hookimpl",
    "target_lm_head",
]
