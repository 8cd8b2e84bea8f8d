"""Draft logits over a draft vocabulary from the rows of the target's lm_head.

A drafter that shares the target's lm_head (Medusa with ``original_lm_head``, EAGLE) computes a full-vocabulary
logits call in every draft pass: on SmolLM2-135M a 49,152 x 576 product, the largest part of a drafting step on a
CPU. A draft vocabulary (a subset of the target's tokens, for example the most frequent ones in the answers the draft
was trained on) cuts it to that subset's rows. :class:`TargetHeadRows` gathers those rows from the target's
vocabulary-parallel lm_head once, on its first call (after the weights are loaded and ``bind_target`` has run),
completes them across tensor-parallel ranks, and computes the logits through the GEMM vLLM's platform uses for its
own linear layers.

No torch or vLLM import at module level: the core is imported in vLLM's API process too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("vllm.spec_plugins")


def rows_gemm(rows: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ rows.T`` through the GEMM vLLM's platform uses for its own unquantized linear layers.

    On vLLM's CPU build that is oneDNN with the weight prepacked once: for one row of SmolLM2-135M's hidden size
    against a 7,936-token draft vocabulary it took 0.48 ms inside an engine, where ``x @ rows.T`` took 1.2 ms.
    Elsewhere (CUDA) it is ``F.linear``. Where this vLLM lays the dispatch out differently, the plain product.
    """
    import torch
    import torch.nn as nn

    holder = nn.Module()
    holder.weight = nn.Parameter(rows, requires_grad=False)
    try:
        from vllm.model_executor.layers import utils
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            utils.dispatch_cpu_unquantized_gemm(holder, remove_weight=False)  # sets holder.cpu_linear
        gemm = utils.dispatch_unquantized_gemm()
    except (ImportError, AttributeError, TypeError) as e:
        logger.debug("vllm_spec_plugins: vLLM's GEMM dispatch unavailable (%s); draft logits by torch", e)
        return lambda x: torch.nn.functional.linear(x, rows)
    return lambda x: gemm(holder, x, rows, None)


def vocab_problem(token_ids: torch.Tensor, vocab_size: int, entry: str = "entry") -> str | None:
    """What is wrong with ``token_ids`` as a draft vocabulary of a target with ``vocab_size`` tokens (a 1-D list of
    target ids, each inside the vocabulary, none twice), or ``None``. ``entry`` names an index into it in the
    message (``"draft id"``)."""
    import torch

    ids = token_ids.long()
    if ids.dim() != 1 or ids.numel() > vocab_size:
        return f"has shape {list(ids.shape)}, expected [n] with n <= {vocab_size} (the target's vocabulary size)"
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(((ids < 0) | (ids >= vocab_size)).nonzero()[0])
        return (f"maps {entry} {bad} to target id {int(ids[bad])}, outside the target's vocabulary "
                f"[0, {vocab_size})")
    if torch.unique(ids).numel() != ids.numel():
        first: dict[int, int] = {}
        for i, t in enumerate(ids.tolist()):
            if t in first:
                return f"maps {entry} {first[t]} and {entry} {i} to the same target id {t}"
            first[t] = i
    return None


class TargetHeadRows:
    """Logits over a draft vocabulary, from the target lm_head's rows of its tokens.

    ``TargetHeadRows(token_ids, owner)``: ``token_ids [n]`` are the target ids of the draft vocabulary (column ``j``
    of the logits is token ``token_ids[j]``); ``owner`` names the draft in errors (``"vllm-spec-medusa: draft
    '<path>'"``). ``rows(lm_head, hidden) -> [num_tokens, n]``, with ``lm_head`` the target's (vLLM's
    ``ParallelLMHead`` or tied ``VocabParallelEmbedding``, vocabulary-sharded under tensor parallelism): the first call
    gathers the rows of each rank's shard and an all-reduce completes them, so every rank holds the same ``[n, H]``
    rows; later calls reuse them. The argmax of the logits is a column index: map it back with ``token_ids``.

    Call it only after the weights are loaded (in ``forward`` or ``compute_logits``). The rows are a copy: a target
    whose lm_head weights change after the first call is not followed.
    """

    def __init__(self, token_ids: torch.Tensor, owner: str) -> None:
        self.token_ids = token_ids
        self.owner = owner
        self._rows: torch.Tensor | None = None
        self._logits: Callable[[torch.Tensor], torch.Tensor] | None = None

    def rows(self, lm_head: Any) -> torch.Tensor:
        """The target lm_head's rows of the draft vocabulary ``[n, H]``, replicated on every rank (gathered once)."""
        if self._rows is None:
            weight = getattr(lm_head, "weight", None)
            shard = getattr(lm_head, "shard_indices", None)
            import torch

            if not isinstance(weight, torch.Tensor) or shard is None:
                raise ValueError(f"{self.owner} drafts from a draft vocabulary of the target's lm_head rows, and the "
                                 f"target's lm_head ({type(lm_head).__name__}) has no plain weight to take them from "
                                 f"(quantized?). Store the draft's own lm_head weight [draft vocabulary, hidden_size] "
                                 f"in the checkpoint.")
            ids = self.token_ids.to(device=weight.device, dtype=torch.long)
            start, end = shard.org_vocab_start_index, shard.org_vocab_end_index
            local = (ids >= start) & (ids < end)
            rows = weight[(ids - start).clamp(0, weight.shape[0] - 1)] * local[:, None].to(weight.dtype)
            from vllm.distributed import get_tensor_model_parallel_world_size, tensor_model_parallel_all_reduce

            if get_tensor_model_parallel_world_size() > 1:
                rows = tensor_model_parallel_all_reduce(rows)
            self._rows = rows.contiguous()
        return self._rows

    def __call__(self, lm_head: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        if self._logits is None:
            self._logits = rows_gemm(self.rows(lm_head))
        return self._logits(hidden_states)
