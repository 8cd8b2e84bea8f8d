"""Patch 24 in a real engine (V1): in steps that verify no draft, a plugin drafter's engine samples with vLLM's plain
sampler instead of its rejection sampler; steps with drafts still go through the rejection sampler.

Medusa on the tiny target with the adaptive policy, its step costs from a cost model (not the wall clock), so that
some steps draft and many do not. A throwaway ``sitecustomize.py`` counts the rejection sampler's calls by the
step's drafts, and the plain sampler's calls outside it (the engine runs as a new process so that it runs; the test
fork server never runs ``sitecustomize``).

Oracles: greedy output equals no speculation; the rejection sampler is never called for a step without drafts and
is called for steps with them; the plain sampler serves the steps without drafts. A control engine with the patch
undone by the same ``sitecustomize`` calls the rejection sampler in steps without drafts, so the count can fail.
"""

from __future__ import annotations

import pytest

from tests.conftest import EAGLE_LENGTHS, PROMPTS
from tests.e2e.counting_site import counting_site, read_counts
from vllm_spec_plugins.testing.engine import run_engine

#: prompt lookup off: on the tiny target, which repeats itself, it drafts in most steps, leaving few without drafts
POLICY_ENV = {"VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.3333",
              "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "off"}
NAMES = ["rejection_no_drafts", "rejection_drafts", "plain"]
HOOKS = '''
inside = [False]


def _patch_rejection(mod):
    forward = mod.RejectionSampler.forward

    def counted(self, metadata, *a, **k):
        counts["rejection_drafts" if metadata.max_spec_len else "rejection_no_drafts"] += 1
        inside[0] = True
        try:
            return forward(self, metadata, *a, **k)
        finally:
            inside[0] = False
            _save()

    mod.RejectionSampler.forward = counted


def _patch_sampler(mod):
    forward = mod.Sampler.forward

    def counted(self, *a, **k):
        if not inside[0]:
            counts["plain"] += 1
            _save()
        return forward(self, *a, **k)

    mod.Sampler.forward = counted


def _undo(mod):  # the control: vLLM's _sample as it was, the rejection sampler in every step
    if os.environ.get("TEST_SAMPLER_UNDO"):
        import vllm_spec_plugins.patch.model_runner as pmr
        original = mod.GPUModelRunner._sample
        while hasattr(original, "__wrapped__"):
            original = original.__wrapped__
        pmr._sample_wrap = lambda f: f
        mod.GPUModelRunner._sample = original


when_imported("vllm.v1.sample.rejection_sampler", _patch_rejection)
when_imported("vllm.v1.sample.sampler", _patch_sampler)
when_imported("vllm.v1.worker.gpu_model_runner", _undo)
'''


def _run(tiny, tmp_path, monkeypatch, undo: bool):
    env, counts = counting_site(tmp_path, monkeypatch, NAMES, HOOKS)
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": 3}
    env.update(POLICY_ENV)
    if undo:
        env["TEST_SAMPLER_UNDO"] = "1"
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS, env=env,
                   runner="v1")
    return r, read_counts(counts)


@pytest.mark.parametrize("undo", [False, True], ids=["patched", "control: patch undone"])
def test_steps_without_drafts_use_the_plain_sampler(tiny, tmp_path, monkeypatch, baseline_eagle_lengths, undo):
    r, counts = _run(tiny, tmp_path, monkeypatch, undo)
    assert r.outputs == baseline_eagle_lengths.outputs
    assert counts.get("rejection_drafts", 0) > 0, counts  # the policy drafted in some steps
    if undo:
        assert counts.get("rejection_no_drafts", 0) > 20, counts
    else:
        assert counts.get("rejection_no_drafts", 0) == 0 and counts.get("plain", 0) > 20, counts
