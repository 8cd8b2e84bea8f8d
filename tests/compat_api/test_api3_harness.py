"""API 3 in process: the heads drafter told ``num_drafts`` (tests/plugins/compat_api3) in the test kit's harness,
checked as the API-3 docs showed (docs/testing-plugins.md: ``out.drafts`` "what vLLM would verify", compared with a
plain-torch reference of the model; ``num_drafts=k`` drafts the first ``k`` columns of a full step's).

The batches repeat their tokens, as real text does: with the settings' defaults (prompt lookup ``auto``, the
adaptive policy), the harness must still give the model's drafts, not n-gram matches of those tokens. vLLM runs in
this process (the harness): these tests keep to their own module.
"""

from __future__ import annotations

import pytest
import torch

from tests.compat_api.conftest import defaults
from tests.compat_api.test_api3_heads import make_heads_checkpoint, reference_drafts

#: two requests whose tokens repeat with periods 3 and 2: prefill, then decode steps
PREFILL = {"a": [1, 5, 6, 7, 5, 6, 7, 5, 6], "b": [1, 9, 8, 9, 8, 9, 8]}
DECODE = [{"a": 7, "b": 9}, {"a": 5, "b": 8}, {"a": 6, "b": 9}]


@pytest.fixture(scope="module")
def harness(compat_target, tmp_path_factory):
    from vllm_spec_plugins.testing.harness import DrafterHarness

    draft = make_heads_checkpoint(tmp_path_factory.mktemp("api3-harness") / "draft", compat_target)
    with pytest.MonkeyPatch.context() as mp:  # every setting at its default while the harness is built
        for name in defaults():
            mp.delenv(name)
        return DrafterHarness(compat_target, draft, num_speculative_tokens=3), draft


def _steps(h, num_drafts=None):
    """The prefill, then the decode steps, of requests ``a`` and ``b`` (fresh ids per call); each step's result."""
    g = torch.Generator().manual_seed(0)
    ids = [f"a{num_drafts}", f"b{num_drafts}"]
    lens = [len(PREFILL["a"]), len(PREFILL["b"])]
    out = [h.step(ids, sampled=[[7], [9]], query_lens=lens, token_ids=PREFILL["a"] + PREFILL["b"],
                  positions=torch.tensor(list(range(lens[0])) + list(range(lens[1]))),
                  hidden_states=torch.randn(sum(lens), 128, generator=g) * 3, num_drafts=num_drafts)]
    pos = list(lens)
    last = {"a": 7, "b": 9}
    for step in DECODE:
        out.append(h.step(ids, sampled=[[step["a"]], [step["b"]]], token_ids=[last["a"], last["b"]],
                          positions=torch.tensor(pos), hidden_states=torch.randn(2, 128, generator=g) * 3,
                          num_drafts=num_drafts))
        last = step
        pos = [p + 1 for p in pos]
    return out


def test_harness_drafts_equal_the_reference_on_repetitive_tokens(harness):
    h, draft = harness
    assert h.proposer.takes_num_drafts
    for out in _steps(h):
        assert out.drafts.shape == (2, 3)
        assert torch.equal(out.drafts, reference_drafts(draft, out.inputs["hidden_states"])[:, :3])


def test_harness_num_drafts_gives_the_first_columns_of_a_full_step(harness):
    h, _ = harness
    full = _steps(h)
    for k in (1, 2):
        for a, b in zip(_steps(h, k), full):
            assert torch.equal(a.drafts, b.drafts[:, :k]), k
