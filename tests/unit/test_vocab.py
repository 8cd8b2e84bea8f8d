"""vllm_spec_plugins.vocab: a draft vocabulary's checks, and its logits from the target lm_head's rows."""

from __future__ import annotations

import types

import pytest
import torch


@pytest.mark.parametrize("ids,problem", [
    ([7, 2, 9], None),
    ([], None),
    ([7, 2, 10], "maps entry 2 to target id 10, outside the target's vocabulary [0, 10)"),
    ([-1, 2], "maps entry 0 to target id -1, outside"),
    ([7, 2, 7], "maps entry 0 and entry 2 to the same target id 7"),
    ([[1, 2]], "has shape [1, 2], expected [n] with n <= 10"),
    (list(range(10)) + [3], "has shape [11], expected [n] with n <= 10"),
])
def test_vocab_problem_names_the_entry_and_the_token(ids, problem):
    from vllm_spec_plugins.vocab import vocab_problem

    found = vocab_problem(torch.tensor(ids, dtype=torch.long), 10)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def _head(weight, start, end):
    """A vocabulary-parallel lm_head's shard as vLLM lays it out: rows [0, end - start) hold target ids [start, end),
    then padding."""
    return types.SimpleNamespace(weight=weight, shard_indices=types.SimpleNamespace(org_vocab_start_index=start,
                                                                                    org_vocab_end_index=end))


def test_rows_and_logits_of_the_draft_vocabulary(monkeypatch):
    """The logits' column j is token_ids[j] of the target head; a shard holds only its own rows (the others are zero,
    for the all-reduce across ranks to complete); the rows are gathered once."""
    import vllm.distributed as dist

    from vllm_spec_plugins import TargetHeadRows

    torch.manual_seed(0)
    full = torch.randn(12, 8)
    ids = torch.tensor([9, 0, 4, 11])
    monkeypatch.setattr(dist, "get_tensor_model_parallel_world_size", lambda: 1)
    rows = TargetHeadRows(ids, "draft 'x'")
    head = _head(full, 0, 12)
    x = torch.randn(3, 8)
    torch.testing.assert_close(rows(head, x), x @ full[ids].T, rtol=1e-4, atol=1e-4)
    assert rows.rows(_head(torch.zeros(12, 8), 0, 12)) is rows.rows(head)  # gathered once

    reduced = []
    monkeypatch.setattr(dist, "get_tensor_model_parallel_world_size", lambda: 2)
    monkeypatch.setattr(dist, "tensor_model_parallel_all_reduce", lambda t: reduced.append(t) or t)
    shard = torch.cat([full[6:], torch.full((2, 8), 99.0)])  # rank 1 of 2: ids 6..11, then 2 rows of padding
    got = TargetHeadRows(ids, "draft 'x'").rows(_head(shard, 6, 12))
    assert len(reduced) == 1
    torch.testing.assert_close(got, torch.stack([full[9], torch.zeros(8), torch.zeros(8), full[11]]))


def test_a_head_without_a_plain_weight_is_refused_naming_the_draft():
    from vllm_spec_plugins import TargetHeadRows

    with pytest.raises(ValueError, match=r"^vllm-spec-medusa: draft '/ckpt' drafts from a draft vocabulary .* "
                                         r"\(QuantHead\) has no plain weight"):
        TargetHeadRows(torch.tensor([1]), "vllm-spec-medusa: draft '/ckpt'")(type("QuantHead", (), {})(),
                                                                              torch.zeros(1, 8))
