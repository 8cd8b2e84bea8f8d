"""Model Runner V2 patches (worker processes). See :mod:`vllm_spec_plugins.patch` for the registry (13-17, 19, 22,
23).

All thin: they build the plugin speculator and hand request events to it
(:mod:`vllm_spec_plugins.runtime.mrv2`); no plugin logic lives here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._compat import has_speculator_registry
from .._names import MM_MASK_ATTR, MODEL_K_ATTR
from ..routing import ATTENTION_METHODS, plugin_of
from ._util import rebind_global, when_imported, wrap_method
from .model_runner import attach_sources

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("vllm.spec_plugins")

MODULE = "vllm.v1.worker.gpu.model_runner"
ENCODER_MODULE = "vllm.v1.worker.gpu.mm.encoder_runner"


def _plugin_speculator(runner: Any) -> Any:
    from ..runtime.mrv2 import Mrv2Runtime

    spec = getattr(runner, "speculator", None)
    return spec if isinstance(spec, Mrv2Runtime) else None


def is_plugin_spec(spec: Any) -> bool:
    return bool(spec is not None and plugin_of(spec) and spec.method in ("draft_model", *ATTENTION_METHODS))


def _init_speculator_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def init_speculator(vllm_config: Any, device: torch.device, req_states: Any) -> Any:
        if not is_plugin_spec(vllm_config.speculative_config):
            return original(vllm_config, device, req_states)
        from ..runtime.mrv2 import make_speculator

        return make_speculator(vllm_config, device, req_states)

    return init_speculator


def _init_wrap(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, vllm_config: Any, device: torch.device, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, device, *args, **kwargs)
        spec = _plugin_speculator(self)
        if spec is not None:
            spec.attach_runner(self)  # what the target was fed (its model state), read at propose
            if spec.needs_aux_hidden_states:
                self.use_aux_hidden_state_outputs = True  # MRV2 turns it on for 4 method names only

    return __init__


def _finish_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def finish_requests(self: Any, scheduler_output: Any) -> Any:
        spec = _plugin_speculator(self)
        if spec is not None:
            spec.requests_left(scheduler_output.finished_req_ids, scheduler_output.preempted_req_ids)
        return original(self, scheduler_output)

    return finish_requests


def _add_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def add_requests(self: Any, scheduler_output: Any) -> Any:
        out = original(self, scheduler_output)
        spec = _plugin_speculator(self)
        if spec is not None and scheduler_output.scheduled_new_reqs:
            spec.requests_added([r.req_id for r in scheduler_output.scheduled_new_reqs], self.req_states)
        return out

    return add_requests


def _postprocess_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def postprocess_sampled(self: Any, idx_mapping: torch.Tensor, sampled_tokens: torch.Tensor, *args: Any,
                            **kwargs: Any) -> Any:  # 0.33 adds draft_tokens
        spec = _plugin_speculator(self)
        if spec is not None and spec.wants_sampled:
            spec.keep_sampled(sampled_tokens)
        return original(self, idx_mapping, sampled_tokens, *args, **kwargs)

    return postprocess_sampled


def _execute_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        spec = _plugin_speculator(self)
        dummy = kwargs.get("dummy_run", args[1] if len(args) > 1 else False)
        if spec is not None and not dummy:  # the step's k_model, for the propose of this step's sample_tokens
            spec.set_model_k(getattr(scheduler_output, MODEL_K_ATTR, None))
        return original(self, scheduler_output, *args, **kwargs)

    return execute_model


def _take_drafts_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def take_draft_token_ids(self: Any) -> Any:
        out = original(self)
        spec = _plugin_speculator(self)
        if out is not None and spec is not None:
            attach_sources(self, spec, out)
        return out

    return take_draft_token_ids


def _gather_mm_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def gather_mm_embeddings(self: Any, *args: Any, draft_lookahead: int = 0, **kwargs: Any) -> Any:
        out = original(self, *args, draft_lookahead=draft_lookahead, **kwargs)
        if not draft_lookahead:  # the target's own gather, not the drafter's look-ahead one
            setattr(self, MM_MASK_ATTR, out[1])
        return out

    return gather_mm_embeddings


def patch_encoder_runner(er: Any) -> None:
    wrap_method(er.EncoderRunner, "gather_mm_embeddings", _gather_mm_wrap)


def patch_module(mr: Any) -> None:
    cls = mr.GPUModelRunner
    if not has_speculator_registry():
        # 0.34 builds the speculator its SpeculatorConfig names, hands it req_states, reads the config's
        # uses_aux_hidden_states and calls its add_request hook (vllm_spec_plugins.speculators)
        rebind_global(mr, "init_speculator", _init_speculator_wrap)
        wrap_method(cls, "__init__", _init_wrap)
        wrap_method(cls, "add_requests", _add_wrap)
    wrap_method(cls, "finish_requests", _finish_wrap)
    wrap_method(cls, "postprocess_sampled", _postprocess_wrap)
    wrap_method(cls, "take_draft_token_ids", _take_drafts_wrap)
    wrap_method(cls, "execute_model", _execute_wrap)


def apply_when_imported() -> None:
    """Patch MRV2's ``GPUModelRunner`` when vLLM imports it (only worker processes that run MRV2 do)."""
    when_imported(MODULE, patch_module)
    when_imported(ENCODER_MODULE, patch_encoder_runner)
