"""Model Runner V2: a draft prefill in a step whose model drafts nothing runs the draft's forward alone.

MRV2's EAGLE loop computes a first draft in its draft prefill (the draft's logits over its vocabulary, and a sample)
even at ``k = 0``, where it then throws it away; the plugin's speculator runs only the forward there, which writes
the draft KV cache (``PluginEagleSpeculator._prefill``). The steps this concerns are those whose first pass cannot be
skipped while the model drafts nothing: prompt chunks in the batch, and catch-ups at the kept-rows limit.

An EAGLE-1 draft under vLLM's static schedule (no drafts while four or more requests run, K=3 below), with prompt
chunks of 32 tokens, so that many steps at ``k = 0`` run the pass. A throwaway ``sitecustomize.py`` counts MRV2's
``sample_draft`` calls and the speculator's forwards by the model's ``k`` of the step (a new process, so that it
runs). Oracles: no first draft is sampled at ``k = 0`` while forwards ran there, and drafts are sampled at ``k > 0``;
output and acceptance per position equal a control engine with vLLM's draft prefill put back by the same
``sitecustomize``, which samples at ``k = 0`` (so the count can fail); output equals no speculation.
"""

from __future__ import annotations

import pytest

from tests.conftest import PROMPTS
from tests.e2e.counting_site import counting_site, read_counts
from tests.e2e.test_draft_catchup import ENGINE, SCHEDULE
from vllm_spec_plugins.testing.engine import run_engine

LENGTHS = [80, 20, 80, 60, 80, 16]
NAMES = ["samples_k0", "samples", "forwards_k0"]
HOOKS = '''
step_k = [None]


def _patch_loop(mod):
    base = mod.TargetDependentARSpeculator
    sample, run_model = base.sample_draft, base._run_model

    def counted_sample(self, *a, **k):
        if step_k[0] is not None:
            counts["samples_k0" if step_k[0] == 0 else "samples"] += 1
            _save()
        return sample(self, *a, **k)

    def counted_forward(self, *a, **k):
        if step_k[0] == 0:
            counts["forwards_k0"] += 1
            _save()
        return run_model(self, *a, **k)

    base.sample_draft, base._run_model = counted_sample, counted_forward


def _patch_speculator(mod):
    cls = mod.PluginEagleSpeculator
    guarded = cls._propose_guarded

    def recorded(self, B, T, last, args, kwargs):
        k = kwargs["num_speculative_tokens"]
        step_k[0] = self.num_speculative_steps if k is None else int(k)
        try:
            return guarded(self, B, T, last, args, kwargs)
        finally:
            step_k[0] = None

    cls._propose_guarded = recorded
    if os.environ.get("TEST_PREFILL_UNDO"):  # the control: vLLM's draft prefill, which samples at k = 0 too
        del cls._prefill


when_imported("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator", _patch_loop)
when_imported("vllm_spec_plugins.runtime.mrv2", _patch_speculator)
'''


def _run(tiny, tmp_path, monkeypatch, undo: bool):
    env, counts = counting_site(tmp_path, monkeypatch, NAMES, HOOKS, tag="-control" if undo else "")
    spec = {"model": str(tiny["eagle"]), "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": SCHEDULE}
    if undo:
        env["TEST_PREFILL_UNDO"] = "1"
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=LENGTHS, llm_kwargs=ENGINE,
                   env=env, runner="v2")
    return r, read_counts(counts)


@pytest.fixture(scope="module")
def baseline(tiny):
    return run_engine(tiny["target"], prompts=PROMPTS, max_tokens=LENGTHS, llm_kwargs=ENGINE)


def test_a_draft_prefill_at_k0_runs_the_forward_alone(tiny, tmp_path, monkeypatch, baseline):
    r, counts = _run(tiny, tmp_path, monkeypatch, undo=False)
    control, control_counts = _run(tiny, tmp_path, monkeypatch, undo=True)
    assert counts["samples_k0"] == 0 and counts["samples"] > 5, counts
    assert control_counts["samples_k0"] >= 3, control_counts
    assert counts["forwards_k0"] == control_counts["forwards_k0"], (counts, control_counts)  # the same passes ran
    assert r.outputs == control.outputs == baseline.outputs
    assert r.metrics["accepted"] > 0 and r.accepted_per_pos == control.accepted_per_pos
