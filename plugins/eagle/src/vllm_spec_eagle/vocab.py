"""A draft vocabulary (``d2t``) for the EAGLE drafters: logits over a subset of the target's tokens.

Draft id ``d`` is target id ``d + d2t[d]``; every target id outside the draft vocabulary gets ``-inf``, so it is
never drafted. Without its own ``lm_head.weight`` the draft takes the target lm_head's rows of those ids (gathered
once, on the first logits: :class:`vllm_spec_plugins.TargetHeadRows`). Against the target's full head this cuts the
logits of every draft pass to the draft vocabulary's share: on SmolLM2-135M, 12,288 of 49,152 rows.
"""

from __future__ import annotations

import torch

from vllm_spec_plugins.vocab import TargetHeadRows, rows_gemm, vocab_problem

__all__ = ["DraftVocabulary", "check_d2t", "rows_gemm"]


def check_d2t(d2t: torch.Tensor, vocab_size: int, checkpoint: str) -> None:
    """Refuse a ``d2t`` that maps a draft id outside the target's vocabulary, or two draft ids to one target id
    (a wrong offset table would otherwise fail at the first draft, or draft tokens the draft never meant)."""
    targets = torch.arange(d2t.numel(), device=d2t.device) + d2t.long() if d2t.dim() == 1 else d2t
    problem = vocab_problem(targets, vocab_size, entry="draft id")
    if problem:
        raise ValueError(f"vllm-spec-eagle: checkpoint '{checkpoint}': d2t {problem}. d2t[d] is the offset of draft "
                         f"id d: target id = d + d2t[d], each target id once.")


class DraftVocabulary:
    """``compute_logits`` for a draft that may have a draft vocabulary (``d2t``): the mixin both EAGLE drafters use.

    The model sets ``config`` (``vocab_size``), ``checkpoint``, ``lm_head`` (its own or, shared by vLLM, the
    target's), ``logits_processor``, ``draft_id_to_target_id`` (``None``: the full vocabulary) and
    ``rows_from_target`` (``d2t`` without ``lm_head.weight``: the target head's rows of the draft vocabulary).
    """

    _head_rows: TargetHeadRows | None = None
    _draft_targets: torch.Tensor | None = None

    def draft_targets(self) -> torch.Tensor:
        """The target id of every draft id, ``arange(draft_vocab) + d2t`` (built once, after loading)."""
        if self._draft_targets is None:
            d2t = self.draft_id_to_target_id
            self._draft_targets = torch.arange(d2t.numel(), device=d2t.device) + d2t
        return self._draft_targets

    def head_rows(self) -> TargetHeadRows:
        """The target lm_head's rows of the draft vocabulary, and the logits over them (built once)."""
        if self._head_rows is None:
            self._head_rows = TargetHeadRows(self.draft_targets(), f"vllm-spec-eagle: draft '{self.checkpoint}' (d2t "
                                                                    f"without lm_head.weight)")
        return self._head_rows

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        if self.rows_from_target:
            logits = self.head_rows()(self.lm_head, hidden_states)
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
