"""V1: a plain decode step that drafts nothing skips vLLM's preparation of the drafter's inputs
(``PluginProposerMixin.propose_without_drafts``, called from patch 5), and the engine core does not take the drafts
of a step that drafted nothing from the runner (patch 25).

The adaptive policy timed by a cost model (not the wall clock), so that some steps draft and many do not. A
throwaway ``sitecustomize.py`` counts the steps the shortcut answered and the calls of vLLM's preparation
(``prepare_inputs_padded``), the engine core's draft takes skipped, and those vLLM still makes; a control engine has
both shortcuts turned off by the same ``sitecustomize``, and counts what each take at ``k = 0`` brought.

Oracles: Medusa (no state to carry): output equals no speculation, the shortcut answered many steps and vLLM's
preparation still ran in the others (drafts, prompts). The context-sensitive tiny EAGLE of test_draft_catchup, traced:
the shortcut answered many steps; output, every step's drafts and which steps skipped, caught up or ran the first
pass equal the control's, which never takes it. Draft takes: none reaches the scheduler after a step at ``k = 0``
(many skipped), and in the control every such take was an empty list per request (nothing skipped changed anything).
"""

from __future__ import annotations

import pytest

from tests.conftest import EAGLE_LENGTHS, PROMPTS
from tests.e2e.counting_site import counting_site, read_counts
from tests.e2e.test_draft_catchup import draft  # noqa: F401  (the fixture)
from tests.e2e.test_eagle_engine import _records
from vllm_spec_plugins.testing.engine import run_engine

#: prompt lookup off: the shortcut is not taken beside it (it reads the inputs vLLM prepares), and on the tiny target,
#: which repeats itself, it drafts in most steps
POLICY_ENV = {"VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.3333",
              "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "off"}
NAMES = ["shortcut", "vllm_prepare", "takes_skipped", "takes_k0", "takes_k0_nonempty"]
HOOKS = '''

def _patch_proposer(mod):
    cls = mod.PluginProposerMixin
    shortcut = cls.propose_without_drafts

    def counted(self, *a, **k):
        if os.environ.get("TEST_SHORTCUT_OFF"):
            return None
        out = shortcut(self, *a, **k)
        if out is not None:
            counts["shortcut"] += 1
            _save()
        return out

    cls.propose_without_drafts = counted


def _patch_base(mod):
    prepare = mod.SpecDecodeBaseProposer.prepare_inputs_padded

    def counted(self, *a, **k):
        counts["vllm_prepare"] += 1
        _save()
        return prepare(self, *a, **k)

    mod.SpecDecodeBaseProposer.prepare_inputs_padded = counted


def _patch_sched(mod):
    skip = mod.drafted_nothing

    def counted(core):
        if os.environ.get("TEST_SHORTCUT_OFF"):
            return False
        out = skip(core)
        if out:
            counts["takes_skipped"] += 1
            _save()
        return out

    mod.drafted_nothing = counted


def _patch_update(mod):
    update = mod.Scheduler.update_draft_token_ids  # vLLM's (the shim wraps it after this)

    def counted(self, draft_token_ids):
        policy = getattr(self, "_vsp_policy", None)
        if policy is not None and policy.k == 0:
            counts["takes_k0"] += 1
            counts["takes_k0_nonempty"] += any(len(d) for d in draft_token_ids.draft_token_ids)
            _save()
        return update(self, draft_token_ids)

    mod.Scheduler.update_draft_token_ids = counted


when_imported("vllm_spec_plugins.patch.scheduler", _patch_sched)
when_imported("vllm.v1.core.sched.scheduler", _patch_update)
when_imported("vllm_spec_plugins.runtime.proposer", _patch_proposer)
when_imported("vllm.v1.spec_decode.llm_base_proposer", _patch_base)
'''


def _run(tiny, tmp_path, monkeypatch, spec: dict, off: bool = False, trace=None):
    env, counts = counting_site(tmp_path, monkeypatch, NAMES, HOOKS, tag="-off" if off else "")
    env.update(POLICY_ENV)
    if off:
        env["TEST_SHORTCUT_OFF"] = "1"
    if trace is not None:
        env["VLLM_SPEC_PLUGINS_TRACE_DIR"] = str(trace)
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS, env=env,
                   runner="v1")
    return r, read_counts(counts)


def test_heads_drafter(tiny, tmp_path, monkeypatch, baseline_eagle_lengths):
    r, counts = _run(tiny, tmp_path, monkeypatch, {"model": str(tiny["medusa"]), "num_speculative_tokens": 3})
    assert r.outputs == baseline_eagle_lengths.outputs
    assert counts.get("shortcut", 0) > 20 and counts.get("vllm_prepare", 0) > 10, counts
    assert counts.get("takes_skipped", 0) > 20 and counts.get("takes_k0", 0) == 0, counts
    assert r.metrics["drafts"] > 0


@pytest.fixture
def eagle_runs(tiny, draft, tmp_path, monkeypatch):  # noqa: F811  (the fixture imported above)
    spec = {"model": str(draft), "num_speculative_tokens": 3}
    runs = {}
    for off in (False, True):
        trace = tmp_path / f"trace-{off}"
        trace.mkdir()
        r, counts = _run(tiny, tmp_path, monkeypatch, spec, off=off, trace=trace)
        runs[off] = (r, counts, _records(trace))
    return runs


def test_attention_drafter_keeps_the_same_rows_with_the_same_drafts(eagle_runs, baseline_eagle_lengths):
    (r, counts, records), (r0, counts0, records0) = eagle_runs[False], eagle_runs[True]
    assert counts.get("shortcut", 0) > 20 and counts0.get("shortcut", 0) == 0, (counts, counts0)
    # draft takes (patch 25): skipped after the steps at k = 0, and what the control took there was empty
    assert counts.get("takes_skipped", 0) > 20 and counts.get("takes_k0", 0) == 0, counts
    assert counts0.get("takes_skipped", 0) == 0 and counts0.get("takes_k0", 0) > 20, counts0
    assert counts0.get("takes_k0_nonempty", 0) == 0, counts0
    assert r.outputs == r0.outputs == baseline_eagle_lengths.outputs
    assert r.metrics["drafts"] > 0 and r.accepted_per_pos == r0.accepted_per_pos
    assert sum(rec["first_pass"] == "skipped" for rec in records) > 20
    assert [(rec["first_pass"], rec["caught_up"]) for rec in records] == \
        [(rec["first_pass"], rec["caught_up"]) for rec in records0]
    assert [rec["drafts"].tolist() for rec in records] == [rec["drafts"].tolist() for rec in records0]
