"""The plugin drafters vLLM's V1 model runner calls (worker processes only; imports vLLM).

The V1 front end of the runtime (:mod:`.core`): :class:`HeadsProposer` and
:class:`AttentionProposer` subclass vLLM's ``DraftModelProposer`` / ``EagleProposer`` so every
``isinstance`` check of the V1 runner holds, and hand what V1's ``propose`` receives to the
runner-independent core. Model Runner V2 has its own front end, :mod:`.mrv2`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from vllm.v1.spec_decode.draft_model import DraftModelProposer
from vllm.v1.spec_decode.eagle import EagleProposer
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

from .._names import MM_MASK_ATTR
from ..api import Drafter
from ..routing import ATTENTION_METHOD
from .core import (  # noqa: F401
    AttentionDrafterAdapter,
    AttentionRuntime,
    DrafterRuntime,
    HeadsRuntime,
    _next_positions,
    drafter_for,
    multimodal_target,
)
from .state import IndexStaging

if TYPE_CHECKING:
    #: What vLLM's ``propose`` takes as ``mm_embed_inputs`` and ``slot_mappings`` (passed through as they are).
    MmEmbedInputs = tuple[list[torch.Tensor], torch.Tensor]
    SlotMappings = dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]

logger = logging.getLogger("vllm.spec_plugins")


def make_proposer(vllm_config: Any, device: torch.device, runner: Any = None) -> HeadsProposer | AttentionProposer:
    d = drafter_for(vllm_config)
    if d.kind == "heads":
        return HeadsProposer(vllm_config, device, runner, drafter=d)
    return AttentionProposer(vllm_config, device, runner, drafter=d)


class PluginProposerMixin(DrafterRuntime):
    """The V1 runner's side of both plugin proposers: what the runner patches hand over each step.

    Placed before the vLLM proposer class in the MRO, so its
    ``prepare_next_token_ids_padded`` wraps vLLM's.
    """

    _slot_staging: IndexStaging | None = None  # request slots to the device (_state_index), made on first use

    # -- hand-over from the runner patches -------------------------------------

    def stash_step(self, runner: Any, *, hidden_states: torch.Tensor,
                   aux_hidden_states: list[torch.Tensor] | None, model_k: int | None = None) -> None:
        self._step = {"hidden_states": hidden_states, "aux_hidden_states": aux_hidden_states, "model_k": model_k}
        if self.reads_target_inputs:  # what the runner fed the target this step (its own buffers, no copy)
            self._step["inputs_embeds"] = runner.inputs_embeds.gpu
            self._step["is_multimodal"] = getattr(runner, MM_MASK_ATTR, None)
            setattr(runner, MM_MASK_ATTR, None)  # the next step gathers its own

    def prepare_next_token_ids_padded(self, sampled_token_ids: torch.Tensor, requests: dict[str, Any],
                                      gpu_input_batch: Any, discard_request_mask: torch.Tensor
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
        # vLLM's proposer, after this mixin in the MRO, defines it; mypy only sees DrafterRuntime above us
        next_token_ids, valid = super().prepare_next_token_ids_padded(  # type: ignore[misc]
            sampled_token_ids, requests, gpu_input_batch, discard_request_mask)
        self._step["sampled_token_ids"] = sampled_token_ids
        self._step["valid_count"] = valid
        self._step["req_ids"] = list(gpu_input_batch.req_ids[: gpu_input_batch.num_reqs])
        return next_token_ids, valid

    def propose_without_drafts(self, runner: Any, scheduler_output: Any, sampled_token_ids: Any,
                               hidden_states: torch.Tensor, aux_hidden_states: list[torch.Tensor] | None,
                               spec_decode_metadata: Any, common_attn_metadata: Any) -> torch.Tensor | None:
        """V1: a plain decode step that drafts nothing, answered without vLLM's preparation of the drafter's inputs.

        vLLM's runner prepares the drafter's inputs in every step of a speculative engine (the next token of each
        request, read back per request on the host; the padded batch's sampling rows; the attention metadata
        rebuilt), 0.3 ms a step on this machine, also where nothing is drafted. In a step where the model drafts
        nothing (``k = 0``), no draft is verified (``max_spec_len == 0``: one sampled token per request), every
        request has one token scheduled and none is a prompt chunk that samples nothing (vLLM's
        ``discard_request_mask``), with synchronous scheduling and no prompt lookup, the next token of each request
        is the one it sampled (``sampled_token_ids[:, 0]``, what vLLM's preparation returns for a request that
        sampled), and the front end does here what its ``propose`` would do with it (:meth:`_without_drafts`).
        Returns the step's drafts (none), or ``None`` where vLLM's path must run."""
        if (getattr(scheduler_output, "num_spec_tokens_to_schedule", None) != 0
                or getattr(spec_decode_metadata, "max_spec_len", None) != 0
                or not isinstance(sampled_token_ids, torch.Tensor) or sampled_token_ids.dim() != 2
                or sampled_token_ids.shape[1] != 1 or getattr(runner, "use_async_scheduling", True)
                or self.lookup is not None or self.guard.disabled):
            return None
        B = sampled_token_ids.shape[0]
        batch = getattr(runner, "input_batch", None)
        discard = getattr(getattr(runner, "discard_request_mask", None), "np", None)
        if (batch is None or discard is None or getattr(batch, "num_reqs", None) != B
                or getattr(scheduler_output, "total_num_scheduled_tokens", None) != B or bool(discard[:B].any())):
            return None
        self.guard.poll()
        if self.guard.disabled:
            return None
        self._step["req_ids"] = list(batch.req_ids[:B])
        if self._trace_dir:  # what the trace records of the step (prepare_next_token_ids_padded keeps it otherwise)
            self._step.update(sampled_token_ids=sampled_token_ids,
                              valid_count=torch.ones(B, dtype=torch.int32, device=sampled_token_ids.device))
        return self._without_drafts(runner, B, sampled_token_ids[:, 0], hidden_states, aux_hidden_states,
                                    common_attn_metadata)

    def _without_drafts(self, runner: Any, B: int, next_token_ids: torch.Tensor, hidden_states: torch.Tensor,
                        aux_hidden_states: list[torch.Tensor] | None, cad: Any) -> torch.Tensor | None:
        """The front end's share of :meth:`propose_without_drafts` (``None``: vLLM's path)."""
        return None

    def on_request_removed(self, req_id: str) -> None:
        if self.pool is not None:
            self.pool.release(req_id)
        if self.lookup is not None:
            self.lookup.release(req_id)
        self._drop_kept(req_id)

    def _lookup_prompt(self, req_id: str) -> torch.Tensor | None:
        """The runner's host copy of the request's tokens: its prompt, and its output so far (a request
        seen first after a preemption)."""
        state = getattr(self.runner, "requests", {}).get(req_id)
        ids = list(getattr(state, "prompt_token_ids", None) or ()) + list(getattr(state, "output_token_ids", None) or ())
        return torch.tensor(ids, dtype=torch.int32) if ids else None

    def _lookup_step(self, B: int, T: int, token_ids: torch.Tensor, positions: torch.Tensor,
                     next_token_ids: torch.Tensor, idx: torch.Tensor) -> None:
        if self.lookup is not None:
            self._lookup_observe(B, T, token_ids, positions, next_token_ids, _next_positions(positions, idx))

    def on_request_resumed(self, req_id: str) -> None:
        if self.pool is not None and self._reset_on_preempt:
            self.pool.reset(req_id, self._reset_on_preempt)
        self._drop_kept(req_id)  # its blocks were freed: the prefill it resumes with runs the first pass

    def _state_index(self, B: int) -> torch.Tensor:
        """V1 has no stable request slots: look each request id up in the pool, copy the slots over."""
        assert self.pool is not None
        if self._slot_staging is None:
            self._slot_staging = IndexStaging(self.max_reqs, self.device)
        return self._slot_staging(self.pool.slots_for(self._step["req_ids"][:B]))

    @staticmethod
    def _sample_index(B: int, token_indices_to_sample: torch.Tensor | None, common_attn_metadata: Any
                      ) -> torch.Tensor:
        if token_indices_to_sample is None:  # no drafts in this batch: the last scheduled token of each request
            query_start_loc: torch.Tensor = common_attn_metadata.query_start_loc
            return (query_start_loc[1:B + 1] - 1).to(torch.int64)
        return token_indices_to_sample[:B].to(torch.int64)


class HeadsProposer(PluginProposerMixin, HeadsRuntime, DraftModelProposer):  # type: ignore[misc]  # vLLM's is Any
    """Runs a ``heads`` plugin drafter: one forward per step, one row per request.

    It subclasses :class:`DraftModelProposer` so every ``isinstance`` check and
    the ``draft_model`` branch of the runner (padded batch, async-safe GPU
    token ids) keep working. Inputs come from static buffers allocated here,
    before any warm-up or graph capture; each step fills slices of them.
    """

    def __init__(self, vllm_config: Any, device: torch.device, runner: Any = None, *, drafter: Drafter) -> None:
        # Skip DraftModelProposer.__init__: its vocab/tokenizer checks are for independent draft LMs.
        SpecDecodeBaseProposer.__init__(self, vllm_config=vllm_config, device=device,
                                        pass_hidden_states_to_model=False, runner=runner)
        self._raise_if_draft_tp_mismatch()
        self.use_heterogeneous_vocab = False
        self.vocab_mapping = None
        # No multimodal embeddings from the runner: a heads drafter has no first pass to feed them to (the
        # API-3 sources give what the target was fed). vLLM's shifted gather for drafters would cost a pass over
        # the encoder cache per step, and under a chunked prefill it raises "Encoder cache miss" on 0.32.
        self.supports_mm_inputs = False
        self._setup_plugin(vllm_config, device, runner, drafter,
                           request_rows=vllm_config.scheduler_config.max_num_seqs)

    def load_model(self, target_model: torch.nn.Module | None) -> None:
        with self._plugin_call("failed to build the model or load its weights"):
            self.model = self._get_model()
        self._bind_and_trial(target_model)

    def initialize_attn_backend(self, kv_cache_config: Any, kernel_block_sizes: Any = None) -> None:
        """Heads drafters have no attention layers and no draft KV cache."""
        self.draft_attn_groups: list[Any] = []

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False,
                  slot_mappings: Any = None) -> None:
        self._dummy_forward(max(1, min(num_tokens, self.max_reqs)), max(1, min(num_tokens, self.max_num_tokens)))

    def _without_drafts(self, runner: Any, B: int, next_token_ids: torch.Tensor, hidden_states: torch.Tensor,
                        aux_hidden_states: list[torch.Tensor] | None, cad: Any) -> torch.Tensor | None:
        """Nothing to do at ``k = 0`` without state to carry (``propose`` would fill the forward's inputs for a
        forward it skips); with state, or tracing, ``propose`` runs."""
        if self.pool is not None or self._trace_dir:
            return None
        return torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)

    @torch.inference_mode()
    def propose(self, num_speculative_tokens: int, target_token_ids: torch.Tensor, target_positions: torch.Tensor,
                target_hidden_states: torch.Tensor, next_token_ids: torch.Tensor,
                token_indices_to_sample: torch.Tensor | None, common_attn_metadata: Any, sampling_metadata: Any,
                mm_embed_inputs: MmEmbedInputs | None = None, num_rejected_tokens_gpu: torch.Tensor | None = None,
                slot_mappings: SlotMappings | None = None) -> torch.Tensor:
        B = next_token_ids.shape[0]
        T = common_attn_metadata.num_actual_tokens
        guard = self.guard
        guard.poll()
        if guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        idx = self._sample_index(B, token_indices_to_sample, common_attn_metadata)
        self._step.update(target_token_ids=target_token_ids, num_rejected=num_rejected_tokens_gpu,
                          query_start_loc=common_attn_metadata.query_start_loc)
        self._prepare_step(B, T, next_token_ids, target_positions, idx)  # carries the state, whatever k is
        if guard.disabled:  # the state-carry hook failed
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        self._lookup_step(B, T, target_token_ids, target_positions, next_token_ids, idx)
        mk = self._model_k(num_speculative_tokens)
        model = None  # the model's drafts, for the trace (None: those returned)
        if num_speculative_tokens == 0:  # the drafting policy (or vLLM's schedule) chose a plain decode step
            drafts = torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
        else:
            if mk == 0:  # lookup's drafts only: the model's forward is skipped, as in a plain decode step
                drafts = torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
            else:
                ok, drafts = guard.run(f"{self.drafter.model_class}.forward()", self._forward_drafts, B, T, mk)
                if not ok:
                    return guard.idle(B, num_speculative_tokens, next_token_ids)
                drafts = guard.sanitize(drafts)
            drafts, model = self._compose(drafts, num_speculative_tokens)
        if self._trace_dir:
            self._trace(B, T, drafts, model_drafts=model)
        return drafts


class AttentionProposer(PluginProposerMixin, AttentionRuntime, EagleProposer):  # type: ignore[misc]  # vLLM's is Any
    """Runs an ``attention`` plugin drafter inside vLLM's multi-step EAGLE loop.

    Draft KV cache, attention metadata, positions, slot mappings and CUDA-graph
    dispatch stay vLLM's (:class:`EagleProposer`); the plugin model is wrapped in
    :class:`AttentionDrafterAdapter`.

    A drafter that consumes chosen target layers (``aux_layer_ids``) is served through
    vLLM's ``eagle3`` method: the runner turns the target's aux hidden-state outputs
    on and passes their concatenation ``[num_tokens, n_layers * H_target]`` as
    ``target_hidden_states``. :meth:`propose` reduces it with the model's
    ``combine_hidden_states`` to ``[num_tokens, H]`` before the loop, as vLLM does for
    its own EAGLE-3 classes.
    """

    method: str  # set by vLLM's proposer: speculative_config.method (switched by _plain_loop)
    condensed_first_pass_option = True  # V1: disable_padded_drafter_batch condenses the first pass

    def __init__(self, vllm_config: Any, device: torch.device, runner: Any = None, *, drafter: Drafter) -> None:
        EagleProposer.__init__(self, vllm_config, device, runner)
        self._setup_attention(vllm_config, device, runner, drafter)

    def load_model(self, target_model: torch.nn.Module) -> None:
        with self._plugin_call("failed to build the model or load its weights"), multimodal_target(target_model):
            super().load_model(target_model)  # vLLM's: draft attention layers, embedding / lm_head sharing
        self._wrap_loaded_model()
        self._trial(lambda: self._trial_attention(self.input_ids[:1], self._get_positions(1), self.hidden_states[:1]))
        spec = self.vllm_config.speculative_config
        self._setup_catchup({
            "multimodal embeddings": bool(self.supports_mm_inputs),
            "M-RoPE positions": bool(self.uses_mrope),
            "parallel drafting slots": bool(getattr(self, "needs_extra_input_slots", False)),
            "disable_padded_drafter_batch": bool(getattr(spec, "disable_padded_drafter_batch", False)),
        }, token_dtype=self.input_ids.dtype)

    @torch.inference_mode()
    def dummy_run(self, num_tokens: int, use_cudagraphs: bool = True, is_graph_capturing: bool = False,
                  slot_mappings: Any = None) -> None:
        self._zero_target_inputs(self.max_num_tokens)  # zero embeddings, an all-false mask (not the last step's)
        self.pass_index = 0
        super().dummy_run(num_tokens, use_cudagraphs=use_cudagraphs, is_graph_capturing=is_graph_capturing,
                          slot_mappings=slot_mappings)

    @torch.inference_mode()
    def propose(self, num_speculative_tokens: int, target_token_ids: torch.Tensor, target_positions: torch.Tensor,
                target_hidden_states: torch.Tensor, next_token_ids: torch.Tensor,
                token_indices_to_sample: torch.Tensor | None, common_attn_metadata: Any, sampling_metadata: Any,
                mm_embed_inputs: MmEmbedInputs | None = None, num_rejected_tokens_gpu: torch.Tensor | None = None,
                slot_mappings: SlotMappings | None = None) -> torch.Tensor:
        B = next_token_ids.shape[0]
        T = common_attn_metadata.num_actual_tokens
        guard = self.guard
        guard.poll()
        if guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        ok, drafts = guard.run(f"{self.drafter.model_class} in vLLM's EAGLE loop", self._propose_guarded,
                               B, T, num_speculative_tokens, target_token_ids, target_positions, target_hidden_states,
                               next_token_ids, token_indices_to_sample, common_attn_metadata, sampling_metadata,
                               mm_embed_inputs, num_rejected_tokens_gpu, slot_mappings)
        if not ok or guard.disabled:
            return guard.idle(B, num_speculative_tokens, next_token_ids)
        return guard.sanitize(drafts)

    def _propose_guarded(self, B: int, T: int, num_speculative_tokens: int, target_token_ids: torch.Tensor,
                         target_positions: torch.Tensor, target_hidden_states: torch.Tensor,
                         next_token_ids: torch.Tensor, token_indices_to_sample: torch.Tensor | None,
                         common_attn_metadata: Any, sampling_metadata: Any, mm_embed_inputs: MmEmbedInputs | None,
                         num_rejected_tokens_gpu: torch.Tensor | None, slot_mappings: SlotMappings | None
                         ) -> torch.Tensor:
        if self.buffers or self.lookup is not None:
            idx = self._sample_index(B, token_indices_to_sample, common_attn_metadata)
            self._step.update(target_token_ids=target_token_ids, num_rejected=num_rejected_tokens_gpu,
                              query_start_loc=common_attn_metadata.query_start_loc)
            self._lookup_step(B, T, target_token_ids, target_positions, next_token_ids, idx)
        if self.buffers:
            self._prepare_step(B, T, next_token_ids, target_positions, idx)
            if self.guard.disabled:  # the state-carry hook failed
                return self.guard.idle(B, num_speculative_tokens, next_token_ids)
            self._set_token_request(common_attn_metadata.query_start_loc, B, T)
        self.pass_index = 0
        trace_first = (self._trace_first(B, T, target_token_ids, target_positions, target_hidden_states,
                                         next_token_ids, common_attn_metadata, token_indices_to_sample)
                       if self._trace_dir else None)
        self._step["first_pass"] = "ran"
        mk = self._model_k(num_speculative_tokens)  # fewer than k: the rest is the lookup's (or padding)
        if self.kept is not None:
            self._settle_kept(B, self.runner.input_batch.num_computed_tokens_cpu)
            if self._skip_first_pass(mk, B, T, target_positions, target_hidden_states,
                                     next_token_ids, common_attn_metadata) or \
                    self._keep_verified_rows(mk, B, T, target_token_ids, target_positions, target_hidden_states,
                                             next_token_ids, token_indices_to_sample, common_attn_metadata):
                nothing = torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
                model = None
                if num_speculative_tokens:  # lookup's drafts only
                    nothing, model = self._compose(nothing, num_speculative_tokens)
                if self._trace_dir:
                    self._trace(B, T, nothing, trace_first, model)
                return nothing
            self._catch_up(common_attn_metadata, sampling_metadata)
        if self.combines_target_layers:
            # What vLLM's propose does for method eagle3, but for any model class (see _plain_loop).
            target_hidden_states = self.model.combine_hidden_states(target_hidden_states)
            self._check_combined(target_hidden_states)
            if trace_first is not None:
                trace_first["combined_hidden_states"] = target_hidden_states[:T].cpu().clone()
        # at mk = 0 vLLM's loop discards the first pass's outputs (it returns before the draft's logits)
        with self._plain_loop(), (self._discarding() if mk == 0 else contextlib.nullcontext()):
            drafts: torch.Tensor = super().propose(mk, target_token_ids, target_positions,
                                     target_hidden_states, next_token_ids, token_indices_to_sample,
                                     common_attn_metadata, sampling_metadata, mm_embed_inputs,
                                     num_rejected_tokens_gpu, slot_mappings)
        drafts, model = self._compose(drafts, num_speculative_tokens)
        if self._trace_dir:
            self._trace(B, T, drafts, trace_first, model)
        return drafts

    @staticmethod
    def _trace_first(B: int, T: int, target_token_ids: torch.Tensor, target_positions: torch.Tensor,
                     target_hidden_states: torch.Tensor, next_token_ids: torch.Tensor, cad: Any,
                     token_indices_to_sample: torch.Tensor | None) -> dict[str, Any]:
        """What the trace records of the first pass's inputs (host copies)."""
        return {"target_token_ids": target_token_ids[:T].cpu().clone(),
                "target_positions": target_positions[..., :T].cpu().clone(),
                "target_hidden_states": target_hidden_states[:T].cpu().clone(),
                "next_token_ids": next_token_ids[:B].cpu().clone(),
                "query_start_loc": cad.query_start_loc[:B + 1].cpu().clone(),
                "token_indices_to_sample": None if token_indices_to_sample is None
                else token_indices_to_sample[:B].cpu().clone()}

    # -- the k = 0 floor: skipped first passes and their catch-up (.catchup) ---------------------------------

    def _without_drafts(self, runner: Any, B: int, next_token_ids: torch.Tensor, hidden_states: torch.Tensor,
                        aux_hidden_states: list[torch.Tensor] | None, cad: Any) -> torch.Tensor | None:
        """Keep the step's first-pass rows, as :meth:`propose` does in a plain decode step at ``k = 0``, from the
        runner's own buffers (its positions and input ids, the target's hidden states or aux layers, as vLLM would
        have passed them); ``None`` (vLLM's path, which catches up and runs the pass) where they cannot be kept, or
        for a drafter with extra inputs to prepare, or a target that overrides the hidden states fed to drafters
        (vLLM's ``get_mtp_target_hidden_states``)."""
        if (self.kept is None or self.buffers
                or getattr(runner.get_model(), "get_mtp_target_hidden_states", None) is not None):
            return None
        positions = runner._get_positions(B)
        hidden = (torch.cat([h[:B] for h in aux_hidden_states], dim=-1)
                  if getattr(runner, "use_aux_hidden_state_outputs", False) and aux_hidden_states
                  else hidden_states[:B])
        ok, kept = self.guard.run(f"{self.drafter.model_class} in vLLM's EAGLE loop", self._keep_without_drafts,
                                  B, next_token_ids, positions, hidden, cad)
        if not ok:
            return self.guard.idle(B, 0, next_token_ids)
        if not kept:
            return None
        nothing = torch.empty((B, 0), dtype=torch.int64, device=next_token_ids.device)
        if self._trace_dir:
            self._trace(B, B, nothing, self._trace_first(B, B, runner.input_ids.gpu, positions, hidden,
                                                         next_token_ids, cad, None))
        return nothing

    def _keep_without_drafts(self, B: int, next_token_ids: torch.Tensor, positions: torch.Tensor,
                             hidden: torch.Tensor, cad: Any) -> bool:
        assert self.kept is not None
        self._settle_kept(B, self.runner.input_batch.num_computed_tokens_cpu)
        self._step["first_pass"] = "ran"
        return self._skip_first_pass(0, B, B, positions, hidden, next_token_ids, cad)

    def _skip_first_pass(self, k: int, B: int, T: int, target_positions: torch.Tensor,
                         target_hidden_states: torch.Tensor, next_token_ids: torch.Tensor, cad: Any) -> bool:
        """V1's arguments for :meth:`AttentionRuntime._keep_first_pass`: with one row per request, request ``i``'s
        row is row ``i`` (``token_indices_to_sample``, when vLLM passes it, is ``0..B-1``), its input token
        ``next_token_ids[i]`` and its KV slot the step's ``slot_mapping[i]``."""
        return self._keep_first_pass(k, B, T, cad.max_query_len, next_token_ids, target_positions, cad.slot_mapping,
                                     target_hidden_states)

    def _keep_verified_rows(self, k: int, B: int, T: int, target_token_ids: torch.Tensor,
                            target_positions: torch.Tensor, target_hidden_states: torch.Tensor,
                            next_token_ids: torch.Tensor, token_indices_to_sample: torch.Tensor | None, cad: Any
                            ) -> bool:
        """V1's batch for :meth:`AttentionRuntime._keep_verified` (see :meth:`AttentionRuntime._may_keep_verified`):
        every request decoding (its last sampled token and its drafts: the runner's count of computed tokens one
        short of its known tokens), each request's rows from ``query_start_loc``, its sampled token at its last
        accepted row (``token_indices_to_sample``), the KV slots from the step's ``slot_mapping``."""
        batch = getattr(self.runner, "input_batch", None)
        if token_indices_to_sample is None or batch is None or not self._may_keep_verified(k, B, T):
            return False
        qsl = cad.query_start_loc_cpu[:B + 1].tolist()
        computed = batch.num_computed_tokens_cpu[:B].tolist()
        known = batch.num_tokens_no_spec[:B].tolist()
        if any(c + 1 != n for c, n in zip(computed, known, strict=True)):  # a prefill's chunk
            return False
        return self._keep_verified(B, T, [b - a for a, b in itertools.pairwise(qsl)], computed, target_token_ids,
                                   token_indices_to_sample, next_token_ids, target_positions, cad.slot_mapping,
                                   target_hidden_states)

    def _catch_up(self, cad: Any, sampling_metadata: Any) -> None:
        """Before a first pass runs: replay the kept rows of this step's requests, each request's rows as one
        chunk of a prefill (its context is the KV written before them), through vLLM's own first pass with no
        drafts. It writes the draft KV the skipped passes would have written; the step's own first pass follows."""
        for batch_rows, ends, idx in self._kept_passes():
            self._catch_up_pass(cad, sampling_metadata, batch_rows, ends, idx)

    def _catch_up_pass(self, cad: Any, sampling_metadata: Any, batch_rows: list[int], ends: list[int],
                       idx: torch.Tensor) -> None:
        """One catch-up pass: the kept rows ``idx`` of the requests at ``batch_rows`` of this step's batch,
        request ``i``'s rows from ``ends[i]`` to ``ends[i + 1]``."""
        assert self.kept is not None
        kept = self.kept
        token_ids, positions = kept.token_ids[idx], kept.positions[idx]
        qsl_cpu, qsl, rows, seq_lens, max_query_len = self._catch_up_layout(batch_rows, ends, positions,
                                                                            cad.query_start_loc_cpu.dtype)
        last = qsl[1:].to(torch.int64) - 1
        replaced: dict[str, Any] = {
            "query_start_loc": qsl, "query_start_loc_cpu": qsl_cpu, "seq_lens": seq_lens.to(cad.seq_lens.dtype),
            "num_reqs": len(batch_rows), "num_actual_tokens": ends[-1],
            "max_query_len": max_query_len, "max_seq_len": cad.max_seq_len,
            "block_table_tensor": cad.block_table_tensor[rows], "slot_mapping": kept.slots[idx],
            "positions": positions}
        for name in ("seq_lens_cpu_upper_bound", "req_idx"):  # per request: this pass's requests
            value = getattr(cad, name, None)
            if value is not None:
                replaced[name] = value[batch_rows]
        for name in ("is_prefilling", "logits_indices_padded", "num_logits_indices", "max_logits_per_req",
                     "_num_computed_tokens_cache", "_token_to_req_indices_cache"):
            if hasattr(cad, name):
                replaced[name] = None
        hidden = kept.hidden[idx]
        if self.combines_target_layers:
            hidden = self.model.combine_hidden_states(hidden)
        self.pass_index = 0
        with self._plain_loop(), self._discarding():
            # vLLM's first pass shifts the token ids left by one and puts next_token_ids at each request's last
            # row: the kept ids rolled right by one, and each request's last kept id, give the kept ids back
            super().propose(0, torch.roll(token_ids, 1), positions, hidden, token_ids[last], None,
                            cad.replace(**replaced), sampling_metadata)

    @contextlib.contextmanager
    def _plain_loop(self) -> Iterator[None]:
        """Run vLLM's loop as method ``eagle`` when the target layers were combined here already.

        For method ``eagle3`` vLLM's ``propose`` asserts that the model is one of its own
        EAGLE-3 classes before calling ``combine_hidden_states``; the plugin model is not.
        Having combined them in :meth:`propose`, the loop that follows is exactly the
        ``eagle`` one (``propose`` reads ``self.method`` only for that step), so the
        attribute is switched for the duration of the call and restored afterwards. The
        runner and the config keep ``eagle3`` (aux outputs on, draft KV cache).
        """
        if not self.combines_target_layers or self.method == ATTENTION_METHOD:
            yield
            return
        method = self.method
        self.method = ATTENTION_METHOD
        try:
            yield
        finally:
            self.method = method
