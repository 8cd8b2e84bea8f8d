"""An in-process harness: a plugin drafter on CPU, fed with fake batches, no engine.

It builds what an engine start builds, in the calling process and without a scheduler
or workers: the engine config through vLLM's own ``EngineArgs.create_engine_config``
(with the runner shim's config patch, so the plugin is selected, its config class
loaded and missing sizes filled from the target exactly as in ``vllm serve``), vLLM's
model-parallel state for one CPU rank, the target model (vLLM's loader) when the drafter
binds to it, and the shim's real :class:`~vllm_spec_plugins.runtime.proposer.HeadsProposer`,
whose ``load_model`` builds the draft through vLLM's loader (every parameter must load)
and calls ``bind_target``. :meth:`DrafterHarness.step` then runs the proposer's own propose
path (input buffers, carried state by request id, the state-carry hook, ``forward``) on
a batch you describe::

    from vllm_spec_plugins.testing.harness import DrafterHarness

    h = DrafterHarness(target_dir, draft_dir, num_speculative_tokens=3)
    out = h.step(["a", "b"], sampled=[[5, 6, -1, -1], [7, -1, -1, -1]])
    out.drafts          # [2, 3] int64, what the engine would verify
    out.inputs          # every tensor forward / the hook received, by parameter name
    h.state("a")        # the carried state of request "a" after the step
    h.finish("a")       # as when the request finishes or aborts: its state slot is freed

Heads drafters (``kind="heads"``) only: attention drafters run inside vLLM's multi-step
EAGLE loop with a KV cache, which needs an engine (use ``run_engine``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..inprocess import (  # the test kit's lower-level pieces (docs/testing-plugins.md)
    build_draft_model,
    build_target_model,
    engine_config,
    init_cpu_runtime,
    start_heads_proposer,
)

__all__ = ["DrafterHarness", "StepResult", "build_draft_model", "build_target_model", "engine_config",
           "init_cpu_runtime", "start_heads_proposer"]

@dataclass
class StepResult:
    drafts: Any
    """Draft token ids ``[num_reqs, k]`` (int64), what vLLM would verify: the model's (the harness runs without
    prompt lookup)."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """Every tensor ``forward`` received, by parameter name (copies)."""
    hook_inputs: dict[str, Any] = field(default_factory=dict)
    """Every tensor the state-carry hook received (state as it was before the step; copies)."""
    state: dict[str, Any] = field(default_factory=dict)
    """The batch rows' carried state after the step, by state name (copies)."""


class _AttnMeta:
    """What the heads proposer reads from vLLM's ``CommonAttentionMetadata``: token count and query starts."""

    def __init__(self, query_start_loc: Any, num_actual_tokens: int) -> None:
        self.query_start_loc = query_start_loc
        self.num_actual_tokens = num_actual_tokens


class DrafterHarness:
    """A heads drafter plugin on CPU, driven step by step with fake batches (see the module docstring).

    Args:
        target: target checkpoint folder (e.g. ``make_tiny_target``); its config sizes the inputs,
            and the model is built when the drafter has a ``bind_target`` method.
        draft: the draft checkpoint folder.
        num_speculative_tokens: ``k``.
        load_target: build the target model (default: when the drafter defines ``bind_target``).
        engine_kwargs: more ``EngineArgs`` (``max_num_seqs``, ``dtype``...).
    """

    def __init__(self, target: Any, draft: Any, *, num_speculative_tokens: int = 3, method: str | None = None,
                 load_target: bool | None = None, **engine_kwargs: Any) -> None:
        started = start_heads_proposer(target, draft, num_speculative_tokens=num_speculative_tokens, method=method,
                                       load_target=load_target, **engine_kwargs)
        self.vllm_config = started.vllm_config
        self.drafter = started.drafter
        self.device = started.device
        self.proposer = started.proposer
        # No prompt lookup here: ``auto`` (its default) turns it on only where the adaptive policy chooses each
        # step's k, and here the caller does (``num_drafts``). With it, ``drafts`` would hold n-gram matches of the
        # batches' tokens in place of the model's, which a harness test compares with a reference of its model.
        self.proposer.lookup = None
        self.target_model = started.target_model
        self.k = self.vllm_config.speculative_config.num_speculative_tokens
        self.hidden_size = self.vllm_config.model_config.get_hidden_size()
        self.model = self.proposer.model

    # -- batches -----------------------------------------------------------------

    def step(self, req_ids: list[str], *, sampled: Any = None, num_new: Any = None, query_lens: Any = None,
             hidden_states: Any = None, aux_hidden_states: Any = None, positions: Any = None,
             token_ids: Any = None, num_rejected: Any = None, seed: int | None = 0,
             num_drafts: int | None = None) -> StepResult:
        """One drafting step over the requests ``req_ids`` (batch rows in this order).

        Args:
            sampled: ``[num_reqs, <= k + 1]`` tokens the target produced this step (left-aligned,
                ``-1`` where rejected), as a nested list or tensor. Default: one random token per row.
            num_new: tokens appended per row (default: the non-negative entries of ``sampled``); 0 marks
                a row that produced nothing (partial prefill): its state is kept.
            query_lens: scheduled tokens per request (default: ``num_new`` or 1); the token rows of
                ``*_ALL`` sources.
            hidden_states: the target's final hidden states of all scheduled tokens ``[sum(query_lens),
                hidden]``: one row per scheduled *token*, not per request (default: random, from
                ``seed``). ``query_lens`` defaults to the tokens each row of ``sampled`` produced, so with
                ``sampled=[[5, 6, -1], [7, -1, -1]]`` the step has 3 token rows. ``TARGET_HIDDEN_LAST``
                takes each request's last row of its own tokens.
            aux_hidden_states: one ``[num_tokens, hidden]`` tensor per chosen target layer.
            positions: position of every scheduled token (default: ``0..num_tokens-1``).
            token_ids: the scheduled tokens' ids ``[num_tokens]`` (``TOKEN_IDS_ALL``; default: random).
            num_rejected: per request, how many trailing scheduled tokens were rejected drafts
                (``NUM_REJECTED``; default: none).
            num_drafts: the step's k, ``0..num_speculative_tokens`` (default: all of them): what the drafting
                policy chose. A forward taking ``num_drafts`` (API 3) receives it; the drafts returned have
                that many columns (0: the forward is skipped, the state-carry hook still runs).
        """
        import torch
        from vllm.config import set_current_vllm_config

        B = len(req_ids)
        g = torch.Generator().manual_seed(seed or 0)
        if sampled is None:
            sampled = torch.randint(3, 200, (B, 1), generator=g)
        if not isinstance(sampled, torch.Tensor):  # ragged lists: pad with -1
            width = max(1, *(len(r) for r in sampled))
            sampled = [list(r) + [-1] * (width - len(r)) for r in sampled]
        sampled = torch.as_tensor(sampled, dtype=torch.int32).reshape(B, -1)
        full = torch.full((B, self.k + 1), -1, dtype=torch.int32)
        full[:, : min(sampled.shape[1], self.k + 1)] = sampled[:, : self.k + 1]
        valid = (full >= 0).sum(dim=1).to(torch.int32) if num_new is None else torch.as_tensor(num_new,
                                                                                               dtype=torch.int32)
        qlens = torch.as_tensor(query_lens if query_lens is not None else valid.clamp(min=1), dtype=torch.int64)
        T = int(qlens.sum())
        qsl = torch.zeros(B + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(qlens, 0)
        if hidden_states is None:
            hidden_states = torch.randn(T, self.hidden_size, generator=g)
        hidden_states = torch.as_tensor(hidden_states, dtype=self.vllm_config.model_config.dtype)
        if hidden_states.dim() != 2 or hidden_states.shape[0] < T:
            raise ValueError(f"Harness.step: hidden_states has shape {list(hidden_states.shape)}, expected "
                             f"[{T}, hidden] (one row per scheduled token: query_lens {qlens.tolist()} add up to {T}; "
                             f"query_lens defaults to the tokens each row of sampled produced)")
        if positions is None:
            positions = torch.arange(T, dtype=torch.int64)
        if token_ids is None:
            token_ids = torch.randint(3, 200, (T,), generator=g)
        token_ids = torch.as_tensor(token_ids, dtype=torch.int32)
        if num_rejected is not None:
            num_rejected = torch.as_tensor(num_rejected, dtype=torch.int32)
        last = torch.where(valid > 0, full.gather(1, (valid.long() - 1).clamp(min=0)[:, None])[:, 0],
                           torch.zeros_like(valid))
        p = self.proposer
        p._step = {"hidden_states": hidden_states, "aux_hidden_states": aux_hidden_states,
                   "sampled_token_ids": full, "valid_count": valid, "req_ids": list(req_ids)}
        hook_inputs: dict[str, Any] = {}
        if p.update_bindings:
            hook = getattr(p.model, self.drafter.update_state)

            def spy(**kw: torch.Tensor) -> Any:
                hook_inputs.update({n: v.clone() for n, v in kw.items()})
                return hook(**kw)

            setattr(p.model, self.drafter.update_state, spy)
        try:
            with set_current_vllm_config(self.vllm_config):
                k = self.k if num_drafts is None else int(num_drafts)
                if not 0 <= k <= self.k:
                    raise ValueError(f"Harness.step: num_drafts={k} is outside 0..{self.k} (num_speculative_tokens)")
                drafts = p.propose(k, token_ids, positions, hidden_states, last, None,
                                   _AttnMeta(qsl, T), None, num_rejected_tokens_gpu=num_rejected)
        finally:
            if p.update_bindings:
                delattr(p.model, self.drafter.update_state)
        inputs = {b.param: p.buffers[b.key][: T if b.source.rows == "token" else B].clone()
                  for b in p.forward_bindings if b.source is not None}
        state = {}
        if p.pool is not None:
            state = {name: p.buffers[("state", name)][:B].clone() for name in p.pool.tensors}
        return StepResult(drafts.clone(), inputs, hook_inputs, state)

    # -- request lifecycle ---------------------------------------------------------

    def state(self, req_id: str) -> dict[str, Any]:
        """The carried state of ``req_id`` (``{}`` for a drafter without state, or an unknown request)."""
        pool = self.proposer.pool
        if pool is None or req_id not in pool.slot_of:
            return {}
        slot = pool.slot_of[req_id]
        return {name: t[slot].clone() for name, t in pool.tensors.items()}

    def finish(self, req_id: str) -> None:
        """The request finished or was aborted: its state slot is freed (as the runner shim does)."""
        self.proposer.on_request_removed(req_id)

    def resume(self, req_id: str) -> None:
        """The request resumes after preemption: ``on_preempt="reset"`` state starts again from its init."""
        self.proposer.on_request_resumed(req_id)

    @property
    def live_requests(self) -> int:
        return len(self.proposer.pool) if self.proposer.pool is not None else 0
