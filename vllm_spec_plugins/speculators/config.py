"""The ``SpeculatorConfig`` of each kind of plugin drafter on vLLM 0.34 (imports vLLM 0.34; every process).

Each subclasses the config of the built-in speculator it behaves like, as vLLM's registry asks, and names the plugin
speculator that runs it (:mod:`vllm_spec_plugins.runtime.mrv2`):

* :class:`PluginHeadsConfig`: ``heads`` drafters behave like a draft model (``draft_model``: a checkpoint of its own,
  loaded by vLLM's loader) without draft KV cache or look-ahead slots, over the target's vocabulary;
* :class:`PluginEagleConfig` / :class:`PluginEagle3Config`: ``attention`` drafters run inside vLLM's EAGLE loop, the
  latter with chosen target layers (``aux_layer_ids``).

Like vLLM's config modules, this one must not import the speculators: it is imported in every process.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.gpu.spec_decode.eagle.config import Eagle3SpeculatorConfig, EagleSpeculatorConfig
from vllm.v1.worker.gpu.spec_decode.standalone_ar.config import StandaloneARSpeculatorConfig

from ..checkpoint import stamp_hash_factors

_RUNTIME = "vllm_spec_plugins.runtime.mrv2"


class PluginHeadsConfig(StandaloneARSpeculatorConfig):  # type: ignore[misc]  # vLLM's is Any to mypy
    """A ``heads`` drafter: one forward per step over the target's hidden states, no draft KV cache."""

    speculator_class = f"{_RUNTIME}.PluginHeadsSpeculator"
    draft_has_own_vocab = False  # the target's vocabulary (or a subset of it, mapped by the plugin)

    @property
    def num_lookahead_tokens(self) -> int:
        return 0  # no draft KV cache to write ahead

    @property
    def max_num_new_slots_for_drafting(self) -> int:
        return 0

    @property
    def max_model_len(self) -> int | None:
        return None  # position-free: the draft never limits the sequence

    @property
    def uses_aux_hidden_states(self) -> bool:
        # The shim sets the draft's layer ids only for drafters that declare ``aux_layer_ids`` (the runtime refuses a
        # forward asking for aux layers without them); read in the worker before the speculator binds its inputs.
        hf = self.spec_config.draft_model_config.hf_config
        return bool(getattr(hf, "eagle_aux_hidden_state_layer_ids", None))

    def hash_factors(self) -> list[Any]:
        return [*super().hash_factors(), *stamp_hash_factors(self.spec_config.draft_model_config.hf_config)]


class PluginEagleConfig(EagleSpeculatorConfig):  # type: ignore[misc]
    """An ``attention`` drafter in vLLM's EAGLE loop (draft KV cache, attention metadata, graphs: vLLM's)."""

    speculator_class = f"{_RUNTIME}.PluginEagleSpeculator"

    @classmethod
    def matches(cls, spec: Any) -> bool:
        return False  # selected by its plugin's declaration, never by the checkpoint's name

    def hash_factors(self) -> list[Any]:
        return [*super().hash_factors(), *stamp_hash_factors(self.spec_config.draft_model_config.hf_config)]


class PluginEagle3Config(PluginEagleConfig, Eagle3SpeculatorConfig):  # type: ignore[misc]
    """An ``attention`` drafter reading chosen target layers (``aux_layer_ids``) in vLLM's EAGLE-3 loop: the above,
    with the EAGLE-3 config's method and aux hidden-state outputs (it subclasses that config, as vLLM's registry
    asks of a declared config for method ``eagle3``)."""
