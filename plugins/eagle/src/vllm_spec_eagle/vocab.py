"""A draft vocabulary (``d2t``) for the EAGLE drafters: logits over a subset of the target's tokens.

Draft id ``d`` is target id ``d + d2t[d]``; every target id outside the draft vocabulary gets ``-inf``, so it is
never drafted. Without its own ``lm_head.weight`` the draft takes the target lm_head's rows of those ids (gathered
once, on the first logits). Against the target's full head this cuts the logits of every draft pass to the draft
vocabulary's share: on SmolLM2-135M, 12,288 of 49,152 rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
import torch.nn as nn

logger = logging.getLogger("vllm.spec_plugins.eagle")


def rows_gemm(rows: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ rows.T`` through the GEMM vLLM's platform uses for its own unquantized linear layers.

    On vLLM's CPU build that is oneDNN with the weight prepacked once: for one row of SmolLM2-135M's hidden size
    against a 7,936-token draft vocabulary it took 0.48 ms inside an engine, where ``x @ rows.T`` took 1.2 ms, and
    every pass of the draft computes these logits. Elsewhere (CUDA) it is ``F.linear``. Where this vLLM lays the
    dispatch out differently, the plain product.
    """
    holder = nn.Module()
    holder.weight = nn.Parameter(rows, requires_grad=False)
    try:
        from vllm.model_executor.layers import utils
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            utils.dispatch_cpu_unquantized_gemm(holder, remove_weight=False)  # sets holder.cpu_linear
        gemm = utils.dispatch_unquantized_gemm()
    except (ImportError, AttributeError, TypeError) as e:
        logger.debug("vllm-spec-eagle: vLLM's GEMM dispatch unavailable (%s); draft logits by torch", e)
        return lambda x: torch.nn.functional.linear(x, rows)
    return lambda x: gemm(holder, x, rows, None)


def check_d2t(d2t: torch.Tensor, vocab_size: int, checkpoint: str) -> None:
    """Refuse a ``d2t`` that maps a draft id outside the target's vocabulary, or two draft ids to one target id
    (a wrong offset table would otherwise fail at the first draft, or draft tokens the draft never meant)."""
    targets = torch.arange(d2t.numel(), device=d2t.device) + d2t.long()
    problem = None
    if d2t.dim() != 1 or d2t.numel() > vocab_size:
        problem = f"has shape {list(d2t.shape)}, expected [draft_vocab_size] with draft_vocab_size <= {vocab_size}"
    elif targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= vocab_size):
        bad = int(((targets < 0) | (targets >= vocab_size)).nonzero()[0])
        problem = (f"maps draft id {bad} to target id {int(targets[bad])}, outside the target's vocabulary "
                   f"[0, {vocab_size})")
    elif torch.unique(targets).numel() != targets.numel():
        problem = "maps two draft ids to the same target id"
    if problem:
        raise ValueError(f"vllm-spec-eagle: checkpoint '{checkpoint}': d2t {problem}. d2t[d] is the offset of draft "
                         f"id d: target id = d + d2t[d], each target id once.")


class DraftVocabulary:
    """``compute_logits`` for a draft that may have a draft vocabulary (``d2t``): the mixin both EAGLE drafters use.

    The model sets ``config`` (``vocab_size``), ``checkpoint``, ``lm_head`` (its own or, shared by vLLM, the
    target's), ``logits_processor``, ``draft_id_to_target_id`` (``None``: the full vocabulary) and
    ``rows_from_target`` (``d2t`` without ``lm_head.weight``: the target head's rows of the draft vocabulary).
    """

    _target_rows: torch.Tensor | None = None
    _rows_logits: Callable[[torch.Tensor], torch.Tensor] | None = None
    _draft_targets: torch.Tensor | None = None

    def draft_targets(self) -> torch.Tensor:
        """The target id of every draft id, ``arange(draft_vocab) + d2t`` (built once, after loading)."""
        if self._draft_targets is None:
            d2t = self.draft_id_to_target_id
            self._draft_targets = torch.arange(d2t.numel(), device=d2t.device) + d2t
        return self._draft_targets

    def target_rows(self) -> torch.Tensor:
        """The target lm_head's rows of the draft vocabulary ``[draft_vocab, H]``, replicated on every rank.

        vLLM shares the target's (vocab-parallel) lm_head with a draft that has none; each rank
        gathers the rows of its vocabulary shard and an all-reduce sums them (once, on the first call).
        """
        if self._target_rows is None:
            head = self.lm_head
            weight = getattr(head, "weight", None)
            shard = getattr(head, "shard_indices", None)
            if not isinstance(weight, torch.Tensor) or shard is None:
                raise ValueError(f"vllm-spec-eagle: draft '{self.checkpoint}' has d2t but no lm_head.weight, so its "
                                 f"logits use the target's lm_head rows, and the target's lm_head "
                                 f"({type(head).__name__}) has no plain weight to take them from (quantized?). "
                                 f"Store lm_head.weight [draft_vocab_size, hidden_size] in the checkpoint.")
            targets = self.draft_targets()
            start, end = shard.org_vocab_start_index, shard.org_vocab_end_index
            local = (targets >= start) & (targets < end)
            rows = weight[(targets - start).clamp(0, weight.shape[0] - 1)] * local[:, None].to(weight.dtype)
            from vllm.distributed import get_tensor_model_parallel_world_size, tensor_model_parallel_all_reduce

            if get_tensor_model_parallel_world_size() > 1:
                rows = tensor_model_parallel_all_reduce(rows)
            self._target_rows = rows.contiguous()
        return self._target_rows

    def rows_logits(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``h -> h @ target_rows().T``, by vLLM's GEMM for the platform (:func:`rows_gemm`; built once)."""
        if self._rows_logits is None:
            self._rows_logits = rows_gemm(self.target_rows())
        return self._rows_logits

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        if self.rows_from_target:
            logits = self.rows_logits()(hidden_states)
            if self.logits_processor.scale != 1.0:
                logits = logits * self.logits_processor.scale
        else:
            logits = self.logits_processor(self.lm_head, hidden_states)
        if logits is None or self.draft_id_to_target_id is None:
            return logits
        targets = self.draft_targets()
        out = logits.new_full((logits.shape[0], self.config.vocab_size), float("-inf"))
        out[:, targets] = logits
        return out
