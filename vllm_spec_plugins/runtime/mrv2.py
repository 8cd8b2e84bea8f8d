"""The plugin drafters vLLM's Model Runner V2 (MRV2) calls (worker processes only; imports vLLM).

The MRV2 front end of the runtime (:mod:`.core`), built by the shim's ``init_speculator``
(:mod:`vllm_spec_plugins.patch.model_runner_v2`) in place of vLLM's own speculators:

* :class:`PluginHeadsSpeculator` (``heads`` drafters) subclasses MRV2's
  ``DraftModelSpeculator``: no draft layers, no draft KV cache, one forward per step;
* :class:`PluginEagleSpeculator` (``attention`` drafters) subclasses MRV2's
  ``EagleSpeculator``: draft KV cache, attention metadata, slot mappings, sampling, the
  per-step ``k`` and CUDA graphs stay vLLM's; the plugin model runs behind the same
  :class:`~.core.AttentionDrafterAdapter` as on V1.

MRV2's ``propose`` receives what the V1 runner had to be patched for: the target's hidden
states of every scheduled token, its aux layers, and per request ``num_sampled`` /
``num_rejected``. Every source is gathered here from those arguments with tensor ops on the
device (no host sync, fixed shapes: capturable). Request state lives in the runtime's pool;
MRV2's request slots (``input_batch.idx_mapping``) are stable while a request lives, so
the pool slot of each is kept in a device table indexed by that slot (``slot_map``), written
when a request is added, outside ``propose``. MRV2 frees a preempted request's slot and
sends the request back as a new one: its state is parked under its request id and restored
(``on_preempt="keep"``) or re-initialised (``"reset"``) when it returns.

Only the sampled tokens are not a ``propose`` argument: the runner's
``postprocess_sampled`` (called just before) is wrapped to keep them for drafters that
read ``Source.SAMPLED_TOKEN_IDS``.

CUDA graphs: heads drafters run eagerly, as vLLM's own ``StandaloneARSpeculator`` does
(``init_cudagraph_manager`` and ``capture`` do nothing); every input already sits in a static
buffer, so a graph per batch size can be added. Attention drafters get vLLM's graph
handling; the adapter's token-row/request-row switch is set from the lifecycle hooks
(``on_prefill_begin``, ``on_multi_step_decode_begin``), which fire identically at capture
and at replay. Verified on CPU only (Triton interpreter): see docs/model-runner-v2.md.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any

import torch
from vllm.compilation.backends import set_model_tag
from vllm.model_executor.model_loader import get_model
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata, build_slot_mappings_by_layer
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

from .._names import MM_MASK_ATTR
from ..api import Drafter, Source
from .core import AttentionRuntime, DrafterRuntime, HeadsRuntime, drafter_for, multimodal_target

logger = logging.getLogger("vllm.spec_plugins")


def make_speculator(vllm_config: Any, device: torch.device,
                    req_states: Any = None) -> PluginHeadsSpeculator | PluginEagleSpeculator:
    """The plugin speculator for this engine's draft (what ``init_speculator`` returns for plugin specs on vLLM 0.32
    and 0.33; on 0.34 vLLM's registry builds the class its ``SpeculatorConfig`` names, :mod:`..speculators`)."""
    d = drafter_for(vllm_config)
    cls = PluginHeadsSpeculator if d.kind == "heads" else PluginEagleSpeculator
    return cls(vllm_config, device, req_states, drafter=d)


def _announced(vllm_config: Any, cls: type[Any], drafter: Drafter | None) -> Drafter:
    d = drafter_for(vllm_config) if drafter is None else drafter
    logger.info("vllm_spec_plugins: plugin %r (%s) runs on Model Runner V2 (%s)", d.plugin, d.display_dist,
                cls.__name__)
    return d


class Mrv2Runtime(DrafterRuntime):
    """MRV2's side of both plugin speculators: sources from ``propose``'s arguments, state by request slot."""

    # Set by vLLM's speculator class this mixin is combined with (annotations only, no values):
    num_speculative_steps: int  # set by vLLM's speculator: speculative_config.num_speculative_tokens
    max_num_reqs: int  # set by vLLM's speculator: scheduler_config.max_num_seqs
    device: torch.device  # set by vLLM's speculator
    draft_tokens: torch.Tensor  # set by vLLM's speculator: [max_num_reqs, num_speculative_steps] output buffer

    _model_k_next: int | None = None  # the scheduler's k_model for the next propose (set_model_k)

    def _setup_mrv2(self, setup_runtime: Any) -> None:
        """After the vLLM speculator's own ``__init__``: the runtime (``setup_runtime()``), then MRV2's parts."""
        self.num_speculative_tokens = self.num_speculative_steps
        self.max_reqs = self.max_num_reqs
        setup_runtime()
        self.slot_map = torch.zeros(self.max_num_reqs, dtype=torch.int64, device=self.device)
        self.next_ids = torch.zeros(self.max_num_reqs, dtype=torch.int32, device=self.device)
        self.last_rows = torch.zeros(self.max_num_reqs, dtype=torch.int64, device=self.device)
        self._parked: set[str] = set()
        self._sampled: torch.Tensor | None = None
        self.wants_sampled = any(b.source is Source.SAMPLED_TOKEN_IDS
                                 for b in self.forward_bindings + self.update_bindings)

    #: MRV2's table of live requests (``RequestState``): passed to the constructor on vLLM 0.34, from the runner
    #: (patch 14) on 0.32 and 0.33
    _req_states: Any = None

    def attach_runner(self, runner: Any) -> None:
        """The MRV2 model runner (patch 14, vLLM 0.32 and 0.33): its table of live requests."""
        self._req_states = runner.req_states

    def _target_inputs(self, T: int) -> dict[str, Any]:
        """What the target was fed this step, from MRV2's own buffers (no copy): the merged input embeddings
        (the encoder runner's persistent buffer), the multimodal-row mask its gather built (patch 19), and the
        M-RoPE positions (the rope state's buffer), where the target has them. The model state is the runner's,
        which vLLM hands the speculator in ``set_attn``."""
        state = getattr(self, "model_state", None)
        out: dict[str, Any] = {}
        rope = getattr(state, "rope_state", None)
        if rope is not None:
            out["mrope_positions"] = rope.get_positions(T)
        if getattr(self, "reads_target_inputs", False):
            encoder = getattr(state, "encoder_runner", None)
            if encoder is None:
                raise RuntimeError("vllm_spec_plugins: MRV2's model state has no encoder runner: the target's "
                                   "input embeddings are not available on this rank")
            out["inputs_embeds"] = encoder.inputs_embeds
            out["is_multimodal"] = getattr(encoder, MM_MASK_ATTR, None)
            setattr(encoder, MM_MASK_ATTR, None)  # the next step gathers its own
        return out

    # -- request lifecycle (from the runner patches, outside propose) ----------------

    def requests_left(self, finished: Any, preempted: Any) -> None:
        """Before MRV2 frees the slots: free the state of finished requests, park that of preempted ones (and drop
        the kept first-pass rows of both: a preempted request's blocks are freed, its prefill runs the first pass)."""
        for req_id in (*(finished or ()), *(preempted or ())):
            self._drop_kept(req_id)
        if self.lookup is not None:
            for req_id in finished or ():
                self.lookup.release(req_id)
        if self.pool is None:
            return
        for req_id in finished or ():
            self.pool.release(req_id)
            self._parked.discard(req_id)
        for req_id in preempted or ():
            if req_id not in (finished or ()):
                self._parked.add(req_id)

    def add_request(self, req_index: int) -> None:
        """vLLM 0.34's hook: a new request got MRV2 slot ``req_index`` (0.32 and 0.33: patch 16 calls
        :meth:`requests_added`)."""
        req_id = self._req_states.index_to_req_id.get(req_index) if self._req_states is not None else None
        if req_id is not None:
            self.requests_added([req_id], self._req_states)

    def requests_added(self, req_ids: list[str], req_states: Any) -> None:
        """After MRV2 gave each new request a slot: restore or initialise its state, map slot -> pool slot."""
        if self.pool is None:
            return
        for req_id in req_ids:
            if req_id in self._parked:
                self._parked.discard(req_id)
                if self._reset_on_preempt:
                    self.pool.reset(req_id, self._reset_on_preempt)
            index = req_states.req_id_to_index.get(req_id)
            if index is None:
                continue
            slot = self.pool.slots_for([req_id])[0]
            self.slot_map[index] = slot

    def _lookup_prompt(self, req_id: str) -> torch.Tensor | None:
        """MRV2's own table of the request's tokens (prompt, and output before a preemption): its row, up to the
        tokens it was added with (the rest of the row is never read before this runtime writes it)."""
        states: Any = self._req_states
        index = None if states is None else states.req_id_to_index.get(req_id)
        if index is None:
            return None
        row: torch.Tensor = states.all_token_ids.gpu[index, :int(states.prefill_len.np[index])]
        return row

    def _lookup_step(self, B: int, T: int, input_batch: Any, last: torch.Tensor) -> None:
        if self.lookup is not None:
            positions = input_batch.positions[:T]  # sequence positions (MRV2 keeps M-RoPE's apart)
            self._lookup_observe(B, T, input_batch.input_ids, positions, self.next_ids[:B],
                                 positions.index_select(0, last) + 1)

    def keep_sampled(self, sampled_tokens: torch.Tensor) -> None:
        self._sampled = sampled_tokens

    def set_model_k(self, model_k: int | None) -> None:
        """From the runner's ``execute_model`` (patch 23), before the step's ``propose``: how many of the step's
        drafts the plugin's model drafts, where the policy raised ``k`` for prompt lookup's (``None``: all)."""
        self._model_k_next = model_k

    def _state_index(self, B: int) -> torch.Tensor:
        idx = self.slot_index[:B]
        torch.index_select(self.slot_map, 0, self._step["idx_mapping"][:B], out=idx)
        return idx

    # -- sources --------------------------------------------------------------------

    def _gather(self, input_batch: Any, last_hidden_states: torch.Tensor, aux_hidden_states: Any,
                num_sampled: torch.Tensor, num_rejected: torch.Tensor, last_sampled: torch.Tensor,
                next_prefill_tokens: torch.Tensor) -> tuple[int, int, torch.Tensor]:
        """Fill ``self._step`` and the next-token and last-row buffers from MRV2's ``propose`` arguments."""
        B, T = input_batch.num_reqs, input_batch.num_tokens
        slots = input_batch.idx_mapping[:B]
        qsl = input_batch.query_start_loc
        last = self.last_rows[:B]
        # The last accepted row of each request (TDAR's last_token_indices).
        torch.sub(qsl[1:B + 1].to(torch.int64) - 1, num_rejected[:B].to(torch.int64), out=last)
        nxt = self.next_ids[:B]
        prefill = next_prefill_tokens[0] if next_prefill_tokens.dim() == 2 else next_prefill_tokens
        nxt.copy_(torch.where(num_sampled[:B] > 0, last_sampled[slots, 0].to(torch.int32),
                              prefill[slots].to(torch.int32)))
        sampled = None
        if self.wants_sampled and self._sampled is not None:
            s = self._sampled[:B]
            cols = torch.arange(s.shape[1], device=s.device).unsqueeze(0)
            sampled = torch.where(cols < num_sampled[:B].unsqueeze(1), s, torch.full_like(s, -1)).to(torch.int32)
        self._step = {"hidden_states": last_hidden_states, "aux_hidden_states": aux_hidden_states,
                      "valid_count": num_sampled, "req_ids": list(input_batch.req_ids[:B]),
                      "sampled_token_ids": sampled, "target_token_ids": input_batch.input_ids,
                      "num_rejected": num_rejected, "query_start_loc": qsl, "idx_mapping": slots,
                      "model_k": self._model_k_next,
                      **self._target_inputs(T)}
        return B, T, last

    def _begin(self, input_batch: Any, last_hidden_states: torch.Tensor, aux_hidden_states: Any,
               num_sampled: torch.Tensor, num_rejected: torch.Tensor, last_sampled: torch.Tensor,
               next_prefill_tokens: torch.Tensor, num_speculative_tokens: int | None
               ) -> tuple[int, int, int, int, torch.Tensor, torch.Tensor]:
        """The start of a (non-dummy) ``propose``: the step's k, the sources, the guard's flag.
        Returns ``(B, T, k, the model's k, last rows, the drafts to return)``: the model drafts fewer than ``k``
        where the policy raised ``k`` for prompt lookup's drafts (the scheduler verifies the model's only up to
        that many), and the columns past its own are zeros that lookup's drafts overwrite."""
        k = self.num_speculative_steps if num_speculative_tokens is None else int(num_speculative_tokens)
        B, T, last = self._gather(input_batch, last_hidden_states, aux_hidden_states, num_sampled, num_rejected,
                                  last_sampled, next_prefill_tokens)
        self.guard.poll()
        return B, T, k, self._model_k(k), last, self.draft_tokens[:B]

    def _idle(self, out: torch.Tensor, B: int) -> torch.Tensor:
        """Drafts once the guard turned speculation off: MRV2's scheduler has already reserved the
        step's draft slots (as with async scheduling on V1), so they get valid ids, each request's next
        token, verified and rejected; output is unchanged."""
        out.copy_(self.next_ids[:B].to(out.dtype).unsqueeze(1).expand_as(out))
        return out


class PluginHeadsSpeculator(Mrv2Runtime, HeadsRuntime, DraftModelSpeculator):  # type: ignore[misc]  # vLLM's is Any
    """A ``heads`` plugin drafter on MRV2: one forward per step, one row per request, no draft KV cache."""

    def __init__(self, vllm_config: Any, device: torch.device, req_states: Any = None, *,
                 drafter: Drafter | None = None) -> None:
        drafter = _announced(vllm_config, type(self), drafter)
        DraftModelSpeculator.__init__(self, vllm_config, device)
        self._req_states = req_states
        self._setup_mrv2(lambda: self._setup_plugin(vllm_config, device, None, drafter,
                                                             request_rows=self.max_num_reqs))

    def load_draft_model(self, target_model: torch.nn.Module, target_attn_layer_names: set[str]) -> torch.nn.Module:
        """The plugin class through vLLM's loader, as MRV2's ``StandaloneARSpeculator`` loads a draft LM."""
        spec = self.speculative_config
        draft_vllm_config = replace(
            self.vllm_config, model_config=self.draft_model_config, quant_config=None,
            parallel_config=replace(spec.draft_parallel_config, rank=self.vllm_config.parallel_config.rank))
        with set_model_tag("draft_model"):
            model: torch.nn.Module = get_model(vllm_config=draft_vllm_config, prefix="draft_model")
            return model

    def load_model(self, target_model: torch.nn.Module) -> None:
        with self._plugin_call("failed to build the model or load its weights"):
            super().load_model(target_model)
        self.supports_mm_inputs = False  # as on V1 (runtime/proposer.py): the API-3 sources instead
        self._bind_and_trial(target_model)

    def init_cudagraph_manager(self, cudagraph_mode: Any) -> None:
        pass  # eager, as vLLM's StandaloneARSpeculator; inputs are static buffers (graph-ready)

    def capture(self) -> None:
        pass

    @torch.inference_mode()
    def propose(self, input_batch: Any, attn_metadata: dict[str, Any], slot_mappings: dict[str, torch.Tensor],
                last_hidden_states: torch.Tensor, aux_hidden_states: list[torch.Tensor] | None,
                num_sampled: torch.Tensor, num_rejected: torch.Tensor, last_sampled: torch.Tensor,
                next_prefill_tokens: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                dp_sync_state: Any = None, dummy_run: bool = False, skip_attn_for_dummy_run: bool = False,
                mm_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None, is_profile: bool = False,
                num_speculative_tokens: int | None = None) -> torch.Tensor:
        if dummy_run:
            B, T = input_batch.num_reqs, input_batch.num_tokens
            if B:
                self._dummy_forward(max(1, min(B, self.max_num_reqs)), max(1, min(T, self.max_num_tokens)))
            self.draft_tokens[:B].fill_(-1)
            return self.draft_tokens[:B]
        guard = self.guard
        B, T, k, mk, last, out = self._begin(input_batch, last_hidden_states, aux_hidden_states, num_sampled,
                                             num_rejected, last_sampled, next_prefill_tokens, num_speculative_tokens)
        if guard.disabled:
            return self._idle(out, B)
        self._prepare_step(B, T, self.next_ids[:B], input_batch.positions[:T], last)  # carries the state
        if guard.disabled:  # the state-carry hook failed
            return self._idle(out, B)
        self._lookup_step(B, T, input_batch, last)
        out.fill_(-1)
        model = None  # the model's drafts, for the trace (None: those returned)
        if k > 0:
            drafts = out[:, :0]  # mk == 0: lookup's drafts only, the model's forward skipped
            if mk > 0:
                ok, drafts = guard.run(f"{self.drafter.model_class}.forward()", self._forward_drafts, B, T, mk)
                if not ok:
                    return self._idle(out, B)
                drafts = guard.sanitize(drafts)
            returned, model = self._compose(drafts, k)
            out[:, :k].copy_(returned)
        if self._trace_dir:
            self._trace(B, T, out[:, :k], model_drafts=model)
        return out


class PluginEagleSpeculator(Mrv2Runtime, AttentionRuntime, EagleSpeculator):  # type: ignore[misc]  # vLLM's is Any
    """An ``attention`` plugin drafter on MRV2, inside vLLM's EAGLE loop (TargetDependentARSpeculator)."""

    def __init__(self, vllm_config: Any, device: torch.device, req_states: Any = None, *,
                 drafter: Drafter | None = None) -> None:
        drafter = _announced(vllm_config, type(self), drafter)
        EagleSpeculator.__init__(self, vllm_config, device)
        self._req_states = req_states
        self._setup_mrv2(lambda: self._setup_attention(vllm_config, device, None, drafter))

    def load_model(self, target_model: torch.nn.Module) -> None:
        with self._plugin_call("failed to build the model or load its weights"), multimodal_target(target_model):
            super().load_model(target_model)  # vLLM's: load_eagle_model, draft layers, embedding / lm_head sharing
        self._wrap_loaded_model()
        self._trial(lambda: self._trial_attention(self.input_buffers.input_ids[:1], self.input_buffers.positions[:1],
                                                  self.hidden_states[:1]))

    def set_attn(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's, once the KV cache exists; then the kept rows of skipped first passes (one KV-cache group)."""
        super().set_attn(*args, **kwargs)
        self._setup_catchup({
            "multimodal embeddings": bool(self.supports_mm_inputs),
            "several KV-cache groups": len(self.kv_cache_config.kv_cache_groups) > 1,
        }, token_dtype=self.input_buffers.input_ids.dtype)

    # The adapter's row layout follows vLLM's loop phases (identical at capture and replay).
    def on_prefill_begin(self, num_reqs: int) -> None:
        self.pass_index = 0

    def on_multi_step_decode_begin(self, num_reqs: int) -> None:
        self.pass_index = 1

    #: Whether the draft prefill of the step now being proposed samples a first draft (False while the model's
    #: ``k`` is 0: see :meth:`_prefill`); set around vLLM's ``propose`` by :meth:`_propose_guarded`.
    _prefill_samples = True

    def _prefill(self, num_reqs: int, num_tokens: int, attn_metadata: Any, slot_mappings: Any,
                 num_tokens_across_dp: Any, cudagraph_runtime_mode: Any = None, mm_inputs: Any = None,
                 **kwargs: Any) -> None:
        """vLLM's draft prefill; in a step whose model drafts nothing, only its forward.

        The forward writes the draft KV cache of the step's tokens, which later drafts attend to. vLLM's prefill
        also computes a first draft from the last row of each request (the draft's logits over its vocabulary, and a
        sample) and sets up the decode passes that follow, even at ``k = 0``, where its ``propose`` then throws the
        draft away (V1's EAGLE loop returns before its logits there). Here, while the model's ``k`` is 0 (a step with
        a prompt in the batch, or a catch-up at the kept-rows limit, whose first pass cannot be skipped), the forward
        runs alone. With prefill context parallelism (which reshapes the draft's rows) vLLM's prefill runs as it is.
        """
        if cudagraph_runtime_mode is not None:
            kwargs["cudagraph_runtime_mode"] = cudagraph_runtime_mode
        if "skip_sample" in kwargs:  # vLLM 0.34 runs the forward alone itself when told to
            kwargs["skip_sample"] = bool(kwargs["skip_sample"]) or not self._prefill_samples
            with self._discarding() if kwargs["skip_sample"] else contextlib.nullcontext():
                super()._prefill(num_reqs, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
                                 mm_inputs=mm_inputs, **kwargs)
            return
        if self._prefill_samples or getattr(self, "pcp_manager", None) is not None:
            super()._prefill(num_reqs, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp, mm_inputs=mm_inputs,
                             **kwargs)
            return
        with self._discarding():
            self._run_model(num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp=num_tokens_across_dp,
                            mm_inputs=mm_inputs, **kwargs)

    @torch.inference_mode()
    def propose(self, input_batch: Any, attn_metadata: dict[str, Any], slot_mappings: dict[str, torch.Tensor],
                last_hidden_states: torch.Tensor, aux_hidden_states: list[torch.Tensor] | None,
                num_sampled: torch.Tensor, num_rejected: torch.Tensor, last_sampled: torch.Tensor,
                next_prefill_tokens: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                dp_sync_state: Any = None, dummy_run: bool = False, skip_attn_for_dummy_run: bool = False,
                mm_inputs: tuple[list[torch.Tensor], torch.Tensor] | None = None, is_profile: bool = False,
                num_speculative_tokens: int | None = None) -> torch.Tensor:
        args = (input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states, num_sampled,
                num_rejected, last_sampled, next_prefill_tokens, temperature, seeds)
        kwargs = dict(dp_sync_state=dp_sync_state, dummy_run=dummy_run,
                      skip_attn_for_dummy_run=skip_attn_for_dummy_run, mm_inputs=mm_inputs, is_profile=is_profile,
                      num_speculative_tokens=num_speculative_tokens)
        if dummy_run:  # vLLM's warm-up and profile runs: the loop on the static buffers, no state written
            self._zero_target_inputs(self.max_num_tokens)  # zero embeddings, an all-false mask
            try:
                drafts: torch.Tensor = super().propose(*args, **kwargs)
                return drafts
            except KeyboardInterrupt:
                raise
            except BaseException as e:
                raise self._load_error("failed in vLLM's warm-up run of the EAGLE loop", e) from e
        guard = self.guard
        B, T, k, mk, last, out = self._begin(input_batch, last_hidden_states, aux_hidden_states, num_sampled,
                                             num_rejected, last_sampled, next_prefill_tokens, num_speculative_tokens)
        if guard.disabled:
            return self._idle(out, B)
        # vLLM's loop drafts the model's mk: a draft prefill only at 0, as at k = 0
        ok, drafts = guard.run(f"{self.drafter.model_class} in vLLM's EAGLE loop", self._propose_guarded,
                               B, T, last, args, {**kwargs, "num_speculative_tokens": mk})
        if not ok or guard.disabled:
            return self._idle(out, B)
        model = None  # the model's drafts, for the trace (None: those returned)
        if k > 0:
            drafts[:, :k], model = self._compose(guard.sanitize(drafts[:, :mk]), k)
        if self._trace_dir:
            self._trace(B, T, drafts[:, :k].clone(), model_drafts=model)
        return drafts

    def _propose_guarded(self, B: int, T: int, last: torch.Tensor, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> torch.Tensor:
        self._lookup_step(B, T, args[0], last)
        if self.buffers:
            self._prepare_step(B, T, self.next_ids[:B], args[0].positions[:T], last)
            if self.guard.disabled:  # the state-carry hook failed
                return self._idle(self.draft_tokens[:B], B)
            self._set_token_request(args[0].query_start_loc, B, T)
        self.pass_index = 0
        self._step["first_pass"] = "ran"
        k = kwargs["num_speculative_tokens"]  # the model's (the step's less the lookup's), as vLLM's loop reads it
        k = self.num_speculative_steps if k is None else int(k)
        if self.kept is not None:
            input_batch, _, slot_mappings, last_hidden_states, aux_hidden_states = args[:5]
            self._settle_kept(B, input_batch.num_computed_tokens_np)
            hidden = torch.cat(aux_hidden_states, dim=-1) if aux_hidden_states else last_hidden_states
            slots = slot_mappings[self._draft_layer]
            # one row per request: row i's input token is next_ids[i] (_gather), its KV slot the draft layers'
            if self._keep_first_pass(k, B, T, int(input_batch.num_scheduled_tokens[:B].max()), self.next_ids,
                                     input_batch.positions, slots, hidden) or \
                    self._keep_verified_rows(k, B, T, input_batch, slots, hidden, last):
                out = self.draft_tokens[:B]
                out.fill_(-1)  # what vLLM's speculator returns at k = 0
                return out
            for batch_rows, ends, idx in self._kept_passes():
                self._catch_up_pass(input_batch, batch_rows, ends, idx)
        self._prefill_samples = k > 0
        try:
            drafts: torch.Tensor = super().propose(*args, **kwargs)
        finally:
            self._prefill_samples = True
        return drafts

    def _keep_verified_rows(self, k: int, B: int, T: int, input_batch: Any, slots: torch.Tensor,
                            hidden: torch.Tensor, last: torch.Tensor) -> bool:
        """MRV2's batch for :meth:`AttentionRuntime._keep_verified` (see :meth:`AttentionRuntime._may_keep_verified`):
        every request decoding (none still in its prompt: ``is_prefilling_np``), each request's rows from its scheduled
        tokens, its next token at its last accepted row (``last``, as ``prepare_prefill_inputs`` puts it), the draft
        layers' KV slots; the counts of computed tokens are the scheduler's, which MRV2's input batch carries."""
        if not self._may_keep_verified(k, B, T) or bool(input_batch.is_prefilling_np[:B].any()):
            return False
        return self._keep_verified(B, T, [int(n) for n in input_batch.num_scheduled_tokens[:B]],
                                   [int(c) for c in input_batch.num_computed_tokens_np[:B]], input_batch.input_ids,
                                   last, self.next_ids, input_batch.positions, slots, hidden)

    @property
    def _draft_layer(self) -> str:
        return str(min(self.draft_attn_layer_names))

    def _catch_up_pass(self, input_batch: Any, batch_rows: list[int], ends: list[int], idx: torch.Tensor) -> None:
        """Replay kept rows (``idx``; request ``i`` of ``batch_rows`` from ``ends[i]`` to ``ends[i + 1]``) as MRV2's
        draft prefill does, each request's rows as a chunk of a prefill at their positions and KV slots, without
        sampling; the step's own draft prefill follows and overwrites the input buffers."""
        assert self.kept is not None
        kept, n = self.kept, ends[-1]
        positions = self.input_buffers.positions[:n]
        positions.copy_(kept.positions[idx])
        qsl_cpu, qsl, rows, seq_lens, max_query_len = self._catch_up_layout(batch_rows, ends, positions, torch.int32)
        self.input_buffers.input_ids[:n].copy_(kept.token_ids[idx])
        hidden = kept.hidden[idx]
        self.hidden_states[:n].copy_(self.model.combine_hidden_states(hidden) if self.combines_target_layers
                                     else hidden)
        upper = input_batch.seq_lens_cpu_upper_bound[batch_rows]
        slots = kept.slots[idx].unsqueeze(0)  # [one KV-cache group, n]
        attn_metadata = build_attn_metadata(
            attn_groups=self.attn_groups, num_reqs=len(batch_rows), num_tokens=n, query_start_loc_gpu=qsl,
            query_start_loc_cpu=qsl_cpu, max_query_len=max_query_len, seq_lens=seq_lens, max_seq_len=int(upper.max()),
            block_tables=[table[rows] for table in self.block_tables.input_block_tables], slot_mappings=slots,
            kv_cache_config=self.kv_cache_config, seq_lens_cpu_upper_bound=upper, positions=positions)
        self.on_prefill_begin(len(batch_rows))
        with self._discarding():
            self._run_model(n, attn_metadata, build_slot_mappings_by_layer(slots, self.kv_cache_config),
                            num_tokens_across_dp=None)
