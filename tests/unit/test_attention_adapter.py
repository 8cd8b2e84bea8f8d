"""The adapter vLLM's EAGLE loop calls as ``self.model``: what each pass hands the plugin forward.

Pass 1 (rows are the step's scheduled tokens, in the target's layout): a token-row source is the
target's rows as they are, a request-row source each token's request row. Later passes (one row per
request): request rows as they are, and zeros for a token-row source (the drafted tokens were never fed
to the target).
"""

from __future__ import annotations

import types

import torch

from vllm_spec_plugins.api import Source
from vllm_spec_plugins.runtime.core import AttentionDrafterAdapter
from vllm_spec_plugins.runtime.inputs import Binding


class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, **kwargs):
        self.calls.append({k: v.clone() for k, v in kwargs.items()})
        return kwargs["input_ids"].float()


def _proposer(T_max=8):
    embeds = Binding("embeds", Source.TARGET_INPUTS_EMBEDS, shape=(2,))
    mask = Binding("is_mm", Source.IS_MULTIMODAL, dtype="bool")
    new = Binding("num_new", Source.NUM_NEW_TOKENS, dtype="int32")
    buffers = {embeds.key: torch.arange(T_max * 2, dtype=torch.float32).view(T_max, 2) + 1,
               mask.key: torch.tensor([0, 1, 1, 0, 0, 0, 0, 0], dtype=torch.bool),
               new.key: torch.tensor([3, 7, 0, 0, 0, 0, 0, 0], dtype=torch.int32)}
    p = types.SimpleNamespace(
        forward_bindings=[Binding("input_ids", None), embeds, mask, new],
        buffers=buffers,
        later_pass_rows={k: torch.zeros_like(buffers[k]) for k in (embeds.key, mask.key)},
        expanded={new.key: torch.zeros_like(buffers[new.key])},
        token_request=torch.tensor([0, 0, 0, 1, 1, 0, 0, 0]),
        pass_index=0,
    )
    return p, buffers


def test_first_pass_gets_the_target_rows_later_passes_zeros():
    p, buffers = _proposer()
    inner = Recorder()
    adapter = AttentionDrafterAdapter(inner, p)
    adapter(input_ids=torch.arange(5))  # pass 1: 5 token rows (request 0: 3 tokens, request 1: 2)
    adapter(input_ids=torch.arange(2))  # pass 2: one row per request
    first, second = inner.calls
    assert torch.equal(first["embeds"], buffers[Source.TARGET_INPUTS_EMBEDS][:5])
    assert torch.equal(first["is_mm"], buffers[Source.IS_MULTIMODAL][:5])
    assert first["num_new"].tolist() == [3, 3, 3, 7, 7]  # a request-row source: each token's request row
    assert not second["embeds"].any() and second["embeds"].shape == (2, 2)
    assert not second["is_mm"].any() and second["is_mm"].dtype == torch.bool
    assert second["num_new"].tolist() == [3, 7]
    assert p.pass_index == 2


def test_the_buffers_stay_the_target_s_after_later_passes():
    """Later passes read their own zero buffers: the target rows survive for the next step's trace."""
    p, buffers = _proposer()
    before = buffers[Source.TARGET_INPUTS_EMBEDS].clone()
    adapter = AttentionDrafterAdapter(Recorder(), p)
    for rows in (5, 2, 2):
        adapter(input_ids=torch.arange(rows))
    assert torch.equal(buffers[Source.TARGET_INPUTS_EMBEDS], before)


def _layout_check(*, condensed_option, disable_padded=False, pcp=1):
    import pytest

    from vllm_spec_plugins.api import Drafter
    from vllm_spec_plugins.errors import PluginContractError
    from vllm_spec_plugins.runtime.core import AttentionRuntime

    d = Drafter(architectures=("EagleProbe",), model_class="pkg.model:Probe", kind="attention")
    object.__setattr__(d, "plugin", "probe")
    rt = types.SimpleNamespace(forward_bindings=[Binding("embeds", Source.TARGET_INPUTS_EMBEDS, shape=(2,)),
                                                 Binding("n", Source.NUM_NEW_TOKENS)],
                               condensed_first_pass_option=condensed_option)
    cfg = types.SimpleNamespace(speculative_config=types.SimpleNamespace(disable_padded_drafter_batch=disable_padded),
                                parallel_config=types.SimpleNamespace(prefill_context_parallel_size=pcp))
    check = AttentionRuntime._check_first_pass_layout
    if not (condensed_option and disable_padded) and pcp == 1:
        check(rt, cfg, d)
        return None
    with pytest.raises(PluginContractError) as e:
        check(rt, cfg, d)
    return str(e.value)


def test_token_row_sources_refused_where_the_first_pass_is_not_the_target_s_layout():
    assert _layout_check(condensed_option=True) is None  # V1, padded first pass (vLLM's default)
    assert _layout_check(condensed_option=False, disable_padded=True) is None  # MRV2 always pads
    msg = _layout_check(condensed_option=True, disable_padded=True)
    assert "takes token-row source(s) ['embeds']" in msg and "pkg.model:Probe" in msg
    assert "disable_padded_drafter_batch" in msg and "Leave" in msg
    msg = _layout_check(condensed_option=False, pcp=2)
    assert "prefill_context_parallel_size=2" in msg
