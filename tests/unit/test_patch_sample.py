"""Patch 24 on a stand-in V1 runner: the plain sampler (no spec-decode metadata) exactly in the steps that verify no
draft, with a plugin drafter, synchronous scheduling and no logprobs asked for; vLLM's rejection-sampler path in
every other case."""

from __future__ import annotations

import types

import pytest

from vllm_spec_plugins.patch.model_runner import _sample_wrap
from vllm_spec_plugins.runtime.proposer import PluginProposerMixin


def _runner(*, plugin=True, async_scheduling=False, logprobs=None):
    drafter = PluginProposerMixin.__new__(type("D", (PluginProposerMixin,), {})) if plugin else object()
    return types.SimpleNamespace(drafter=drafter, use_async_scheduling=async_scheduling,
                                 input_batch=types.SimpleNamespace(
                                     sampling_metadata=types.SimpleNamespace(max_num_logprobs=logprobs)))


def _call(runner, md):
    seen = []
    wrapped = _sample_wrap(lambda self, logits, md: seen.append(md) or "out")
    assert wrapped(runner, "logits", md) == "out"
    return seen[0]


def test_a_step_with_no_draft_samples_without_the_spec_metadata():
    md = types.SimpleNamespace(max_spec_len=0)
    assert _call(_runner(), md) is None
    assert _call(_runner(), None) is None  # a prompt-only step of an engine without drafts: unchanged


@pytest.mark.parametrize("case", ["drafts", "async", "logprobs", "not a plugin", "renamed"])
def test_every_other_step_keeps_vllms_path(case):
    """Drafts to verify; async scheduling (the spec path also refreshes the batch's draft ids there); a request
    asking for logprobs (the rejection sampler computes them its own way); vLLM's own drafters (not ours to change);
    a vLLM whose metadata no longer has the fields read (``make compat`` would say so too)."""
    md = types.SimpleNamespace(max_spec_len=2 if case == "drafts" else 0)
    runner = _runner(async_scheduling=case == "async", logprobs=5 if case == "logprobs" else None,
                     plugin=case != "not a plugin")
    if case == "renamed":
        runner.input_batch.sampling_metadata = types.SimpleNamespace()
        assert _call(runner, md) is md
        runner = _runner()
        md = types.SimpleNamespace()
    assert _call(runner, md) is md
