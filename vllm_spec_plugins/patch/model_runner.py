"""Model-runner patches (worker processes). See :mod:`vllm_spec_plugins.patch` for the registry.

All patches are thin: they find the plugin drafter and hand over to
:mod:`vllm_spec_plugins.runtime`; no plugin logic lives here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._names import MM_MASK_ATTR, MODEL_K_ATTR, SOURCES_ATTR
from ..routing import ATTENTION_METHODS, plugin_of
from ._util import when_imported, wrap_method

if TYPE_CHECKING:
    import torch

    from ..runtime.proposer import AttentionProposer, HeadsProposer

logger = logging.getLogger("vllm.spec_plugins")

MODULE = "vllm.v1.worker.gpu_model_runner"


def _is_plugin_drafter(runner: Any) -> bool:
    from ..runtime.proposer import PluginProposerMixin

    return isinstance(getattr(runner, "drafter", None), PluginProposerMixin)


@contextlib.contextmanager
def _drafter_factory(gmr: Any, spec: Any) -> Iterator[None]:
    """Make the runner's ``DraftModelProposer(...)`` / ``EagleProposer(...)`` build the plugin proposer.

    vLLM builds ``EagleProposer`` for both of its EAGLE-family methods (``eagle`` and
    ``eagle3``); for ``eagle3`` it then sets ``use_aux_hidden_state_outputs`` from the
    drafter's ``eagle3_use_aux_hidden_state``, which our subclass inherits.
    """
    from ..runtime.proposer import make_proposer

    name = "EagleProposer" if spec.method in ATTENTION_METHODS else "DraftModelProposer"
    original = getattr(gmr, name)

    def factory(vllm_config: Any, device: torch.device, runner: Any = None) -> HeadsProposer | AttentionProposer:
        return make_proposer(vllm_config, device, runner)

    setattr(gmr, name, factory)
    try:
        yield
    finally:
        setattr(gmr, name, original)


def _init_wrap(gmr: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def wrap(original: Callable[..., None]) -> Callable[..., None]:
        def __init__(self: Any, vllm_config: Any, device: torch.device, *args: Any, **kwargs: Any) -> None:
            spec = vllm_config.speculative_config
            if not plugin_of(spec) or spec.method not in ("draft_model", *ATTENTION_METHODS):
                return original(self, vllm_config, device, *args, **kwargs)
            with _drafter_factory(gmr, spec):
                original(self, vllm_config, device, *args, **kwargs)
            drafter = getattr(self, "drafter", None)
            if drafter is not None and getattr(drafter, "needs_aux_hidden_states", False):
                self.use_aux_hidden_state_outputs = True

        return __init__

    return wrap


def _propose_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def propose_draft_token_ids(self: Any, scheduler_output: Any, sampled_token_ids: Any, sampling_metadata: Any,
                                hidden_states: torch.Tensor, sample_hidden_states: torch.Tensor,
                                aux_hidden_states: list[torch.Tensor] | None, spec_decode_metadata: Any,
                                common_attn_metadata: Any, slot_mappings: Any) -> Any:
        if _is_plugin_drafter(self):
            self.drafter.stash_step(self, hidden_states=hidden_states, aux_hidden_states=aux_hidden_states,
                                    model_k=getattr(scheduler_output, MODEL_K_ATTR, None))
            drafts = self.drafter.propose_without_drafts(self, scheduler_output, sampled_token_ids, hidden_states,
                                                         aux_hidden_states, spec_decode_metadata,
                                                         common_attn_metadata)
            if drafts is not None:  # a plain decode step drafting nothing: no input preparation (as vLLM's would)
                self._draft_probs = None
                self._draft_prob_req_ids = None
                return drafts
        return original(self, scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                        sample_hidden_states, aux_hidden_states, spec_decode_metadata, common_attn_metadata,
                        slot_mappings)

    return propose_draft_token_ids


def _removed_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def _on_request_state_removed(self: Any, req_id: str, req_state: Any) -> Any:
        if _is_plugin_drafter(self):
            self.drafter.on_request_removed(req_id)
        return original(self, req_id, req_state)

    return _on_request_state_removed


def _update_states_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def _update_states(self: Any, scheduler_output: Any) -> Any:
        out = original(self, scheduler_output)
        if _is_plugin_drafter(self):
            resumed = getattr(scheduler_output.scheduled_cached_reqs, "resumed_req_ids", ())
            for req_id in resumed:
                self.drafter.on_request_resumed(req_id)
        return out

    return _update_states


def _gather_mm_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def _gather_mm_embeddings(self: Any, scheduler_output: Any, shift_computed_tokens: int = 0, *args: Any,
                              **kwargs: Any) -> Any:
        out = original(self, scheduler_output, shift_computed_tokens, *args, **kwargs)
        if shift_computed_tokens == 0 and _is_plugin_drafter(self):  # the target's own, not EAGLE's shifted one
            setattr(self, MM_MASK_ATTR, out[1])
        return out

    return _gather_mm_embeddings


def attach_sources(runner: Any, drafter: Any, out: Any) -> None:
    """Put the drafter's per-request draft sources on ``out`` (a ``DraftTokenIds``), where prompt lookup runs
    beside it; both runners' ``take_draft_token_ids`` (patches 20 and 22)."""
    try:
        sources = drafter.draft_sources(out.req_ids)
    except Exception:  # the policy then goes by the drafts' acceptance alone, as without lookup
        if not getattr(runner, "_vsp_sources_failed", False):
            runner._vsp_sources_failed = True
            logger.exception("vllm_spec_plugins: reading the drafts' sources (prompt lookup or the model) for "
                             "the drafting policy failed; it goes on without them")
        sources = None
    if sources is not None:  # prompt lookup on: the policy keeps the lookup drafts' acceptance apart
        setattr(out, SOURCES_ATTR, sources)


def _take_drafts_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def take_draft_token_ids(self: Any) -> Any:
        out = original(self)
        if out is not None and _is_plugin_drafter(self):
            attach_sources(self, self.drafter, out)
        return out

    return take_draft_token_ids


def _sample_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def _sample(self: Any, logits: Any, spec_decode_metadata: Any) -> Any:
        md = spec_decode_metadata
        # a request asking for logprobs (max_num_logprobs not None; a dataclass field, so read with a default
        # that keeps vLLM's path should it ever be renamed) keeps the rejection sampler, which computes them
        if (md is not None and getattr(md, "max_spec_len", 1) == 0 and not self.use_async_scheduling
                and getattr(self.input_batch.sampling_metadata, "max_num_logprobs", 0) is None
                and _is_plugin_drafter(self)):
            md = None  # no request verifies a draft this step: vLLM's plain sampler, as without speculation
        return original(self, logits, md)

    return _sample


def patch_module(gmr: Any) -> None:
    cls = gmr.GPUModelRunner
    wrap_method(cls, "__init__", _init_wrap(gmr))
    wrap_method(cls, "propose_draft_token_ids", _propose_wrap)
    wrap_method(cls, "_on_request_state_removed", _removed_wrap)
    wrap_method(cls, "_update_states", _update_states_wrap)
    wrap_method(cls, "_gather_mm_embeddings", _gather_mm_wrap)
    wrap_method(cls, "take_draft_token_ids", _take_drafts_wrap)
    wrap_method(cls, "_sample", _sample_wrap)


def apply_when_imported() -> None:
    """Patch ``GPUModelRunner`` when vLLM imports it (only worker processes do)."""
    when_imported(MODULE, patch_module)
