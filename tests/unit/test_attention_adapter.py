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
        discarding=False,
        takes_kv_only=False,
        _step={},
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


class KvOnlyRecorder(torch.nn.Module):
    """A forward taking ``kv_only`` (API 4): records what it was told; returns None when told."""

    def __init__(self):
        super().__init__()
        self.told = []

    def forward(self, input_ids, hidden_states, kv_only=False):
        self.told.append(kv_only)
        return None if kv_only else hidden_states * 2


def _kv_proposer():
    return types.SimpleNamespace(forward_bindings=[Binding("input_ids", None), Binding("hidden_states", None),
                                                   Binding("kv_only", None)],
                                 buffers={}, later_pass_rows={}, expanded={}, token_request=torch.zeros(8).long(),
                                 pass_index=0, discarding=False, takes_kv_only=True, _step={})


def _passes(adapter, p, mode_name=None, passes=2):
    """``passes`` passes of one call of vLLM's loop under a forward context of cudagraph mode ``mode_name``
    (``None``: no forward context at all); what each pass returned."""
    import contextlib

    from vllm.config import CUDAGraphMode, VllmConfig
    from vllm.forward_context import set_forward_context

    p.pass_index = 0
    ctx = (contextlib.nullcontext() if mode_name is None else
           set_forward_context(None, VllmConfig(), cudagraph_runtime_mode=getattr(CUDAGraphMode, mode_name)))
    with ctx:
        return [adapter(input_ids=torch.arange(3), hidden_states=torch.ones(3, 2)) for _ in range(passes)]


def test_kv_only_told_in_an_eager_first_pass_whose_outputs_are_discarded():
    """API 4: ``kv_only=True`` only in the first pass of a discarding call (a draft prefill at k = 0, a catch-up)
    run eagerly; the loop gets the pass's input hidden states in place of the forward's None. Later passes, calls
    whose outputs are used, and passes under a CUDA graph (which replays what it captured) are told False."""
    p = _kv_proposer()
    inner = KvOnlyRecorder()
    adapter = AttentionDrafterAdapter(inner, p)
    out = _passes(adapter, p, "NONE")  # outputs used: never told
    assert inner.told == [False, False] and torch.equal(out[0][0], torch.full((3, 2), 2.0))
    p.discarding = True
    inner.told.clear()
    out = _passes(adapter, p, "NONE")
    assert inner.told == [True, False]
    assert torch.equal(out[0][0], torch.ones(3, 2)) and out[0][0].shape == out[0][1].shape == (3, 2)
    assert p._step["kv_only"] == 1
    for mode in ("PIECEWISE", "FULL", None):  # graphs, and outside any forward context: never told
        inner.told.clear()
        _passes(adapter, p, mode)
        assert inner.told == [False, False], mode
    assert p._step["kv_only"] == 1


def test_kv_only_never_told_to_a_forward_without_it():
    """A forward without the parameter (API 3 and older, or one that does not ask) runs whole in every pass and
    its outputs go to the loop as they are."""
    p = _kv_proposer()
    p.takes_kv_only, p.discarding = False, True
    p.forward_bindings = p.forward_bindings[:2]
    inner = Recorder()
    out = _passes(AttentionDrafterAdapter(inner, p), p, "NONE", passes=1)
    assert [sorted(c) for c in inner.calls] == [["hidden_states", "input_ids"]]
    assert torch.equal(out[0][0], torch.arange(3).float()) and "kv_only" not in p._step
