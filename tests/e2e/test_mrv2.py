"""Plugin drafters on vLLM's Model Runner V2 (MRV2), real CPU engines.

MRV2 runs here through the test kit's stand-in Triton ``cpu`` backend and Triton's
interpreter (``run_engine(..., runner="v2")``, :mod:`vllm_spec_plugins.testing.mrv2`). Oracles:

* greedy output on MRV2 with plugin drafts equals MRV2 without speculation (and V1), bit for bit;
* our EAGLE-1 and EAGLE-3 on MRV2 propose what vLLM's own EAGLE proposes on MRV2 with the same
  checkpoint (same draft counts, same per-position acceptance; policy off);
* a heads plugin (Medusa, the MLP speculator) proposes on MRV2, step by step and request by
  request, exactly the drafts it proposes on V1 (the traces compared; policy off).

Carried state through preemption and aborts on MRV2, and the adaptive policy there, are the
conformance suite's (``tests/e2e/test_state_plugin.py::TestStatePluginMRV2``).
"""

from __future__ import annotations

import pytest

from tests.conftest import MAX_TOKENS, POLICY_OFF, PROMPTS, with_pythonpath
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.engine import run_engine

MRV2_LINE = "Using V2 Model Runner"


@pytest.fixture(scope="module")
def base_v2(tiny):
    return run_engine(tiny["target"], prompts=PROMPTS, max_tokens=MAX_TOKENS, runner="v2")


def test_mrv2_runs_here_and_matches_v1(base_v2, baseline):
    assert MRV2_LINE in base_v2.log and MRV2_LINE not in baseline.log
    assert base_v2.outputs == baseline.outputs


def _spec(tiny, name, **kw):
    return {"model": str(tiny[name]), "num_speculative_tokens": 3, **kw}


def _by_request(records):
    """Per traced step: base request id -> its drafts (MRV2 may order a batch differently from V1)."""
    return [{base_request_id(r): rec["drafts"][row].tolist() for row, r in enumerate(rec["req_ids"])}
            for rec in records]


#: The MLP speculator runs with every step pinned to k=2 of K=3 (the policy's per-step k, API 3 num_drafts).
HEADS = {"medusa": ("medusa", POLICY_OFF, 3), "mlp": ("mlp_speculator", {"VLLM_SPEC_PLUGINS_POLICY": "2"}, 2)}


@pytest.fixture(scope="module", params=list(HEADS))
def heads(request, tiny, tmp_path_factory):
    draft = request.param
    plugin, policy, _ = HEADS[draft]
    runs = {}
    for runner in ("v1", "v2"):
        trace = tmp_path_factory.mktemp(f"{draft}-{runner}")
        r = run_engine(tiny["target"], speculative_config=_spec(tiny, draft), prompts=PROMPTS, max_tokens=MAX_TOKENS,
                       env={**policy, "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)}, runner=runner)
        runs[runner] = (r, load_trace(trace))
    return plugin, runs


def test_heads_plugin_on_mrv2_output_equals_no_speculation(heads, base_v2):
    plugin, runs = heads
    r, records = runs["v2"]
    assert MRV2_LINE in r.log
    assert f"plugin '{plugin}' (" in r.log and "runs on Model Runner V2 (PluginHeadsSpeculator)" in r.log
    assert r.outputs == base_v2.outputs
    assert r.metrics["accepted"] > 0 and records


def test_heads_plugin_same_drafts_on_v1_and_mrv2(heads):
    plugin, runs = heads
    (v1, rec1), (v2, rec2) = runs["v1"], runs["v2"]
    k = next(k for p, _, k in HEADS.values() if p == plugin)
    for records in (rec1, rec2):  # the forward was told the step's k and ran only those heads
        drafted = [rec for rec in records if rec["drafts"].shape[1]]
        assert drafted and all(rec["num_drafts"] == rec["forward_columns"] == k for rec in drafted)
        assert all(rec["drafts"].shape[1] == k for rec in drafted)
    assert "Model Runner V2" not in v1.log
    assert v1.metrics["drafts"] == v2.metrics["drafts"] and v1.accepted_per_pos == v2.accepted_per_pos
    assert len(rec1) == len(rec2) > 0
    assert _by_request(rec1) == _by_request(rec2)


@pytest.mark.parametrize("draft,method", [("eagle", "eagle"), ("eagle3", "eagle3")], ids=["eagle1", "eagle3"])
def test_eagle_plugin_on_mrv2_equals_vllm_eagle_on_mrv2(tiny, base_v2, draft, method):
    ours = run_engine(tiny["target"], speculative_config=_spec(tiny, draft), prompts=PROMPTS, max_tokens=MAX_TOKENS,
                      env=POLICY_OFF, runner="v2")
    assert "served by plugin 'eagle'" in ours.log
    assert "runs on Model Runner V2 (PluginEagleSpeculator)" in ours.log
    theirs = run_engine(tiny["target"], speculative_config=_spec(tiny, draft, method=method), prompts=PROMPTS,
                        max_tokens=MAX_TOKENS, env={"VLLM_SPEC_PLUGINS": ""}, runner="v2")
    assert "vllm_spec_plugins" not in theirs.log and MRV2_LINE in theirs.log
    assert ours.outputs == base_v2.outputs == theirs.outputs
    assert ours.metrics["accepted"] > 0
    assert ours.metrics["drafts"] == theirs.metrics["drafts"]
    assert ours.accepted_per_pos == theirs.accepted_per_pos


def test_tensor_parallel_2_on_mrv2(tiny, base_v2):
    r = run_engine(tiny["target"], speculative_config=_spec(tiny, "medusa"), prompts=PROMPTS[:4],
                   max_tokens=MAX_TOKENS, env=POLICY_OFF, tensor_parallel_size=2, runner="v2")
    assert MRV2_LINE in r.log and "runs on Model Runner V2 (PluginHeadsSpeculator)" in r.log
    assert r.outputs == base_v2.outputs[:4]
    assert r.metrics["accepted"] > 0


@pytest.mark.parametrize("fault,what", [("raise", "planned failure at forward call"),
                                        ("oov", "outside the target's vocabulary [0, 259)")], ids=["raise", "oov"])
def test_faulty_drafter_degrades_on_mrv2(tiny, base_v2, faulty_plugin_path, tmp_path, fault, what):
    from tests.e2e.test_faults import DIST, faulty_checkpoint

    draft = faulty_checkpoint(tmp_path / fault, fault=fault)
    r = run_engine(tiny["target"], speculative_config={"model": str(draft), "num_speculative_tokens": 3},
                   prompts=PROMPTS, max_tokens=MAX_TOKENS, env=with_pythonpath(faulty_plugin_path), runner="v2")
    assert MRV2_LINE in r.log
    assert r.outputs == base_v2.outputs
    errors = [ln for ln in r.log.splitlines() if "Speculative decoding is now OFF" in ln]
    assert len(errors) == 1 and f"plugin 'faulty' ({DIST})" in errors[0]
    assert what in r.log and "IndexError" not in r.log


def test_v1_can_be_kept_for_plugin_drafters(tiny, base_v2):
    """VLLM_SPEC_PLUGINS_RUNNER=v1: the shim lists the drafter among the features MRV2 lacks, vLLM picks V1
    (with the test kit's Triton stand-in present, vLLM would otherwise pick MRV2)."""
    env = {**POLICY_OFF, "VLLM_SPEC_PLUGINS_RUNNER": "v1"}
    r = run_engine(tiny["target"], speculative_config=_spec(tiny, "medusa"), prompts=PROMPTS[:2], max_tokens=16,
                   env={**env, "VLLM_USE_V2_MODEL_RUNNER": None}, runner="v2")
    assert MRV2_LINE not in r.log
    assert "Model Runner V2 does not yet support vllm-spec-plugins drafter 'medusa' (VLLM_SPEC_PLUGINS_RUNNER=v1" \
        in r.log
    assert r.outputs == [o[:16] for o in base_v2.outputs[:2]]


#: Checkpoint layouts the plugins serve, each on both runners: FasterDecoding Medusa with biases (.pt,
#: K < heads), EAGLE-1 with fc.bias (.bin), EAGLE-1 with a draft vocabulary (d2t, as the shipped SmolLM2 draft),
#: EAGLE-3 with d2t and no lm_head (rows taken from the target), Medusa with a token_map over the target's lm_head (as
#: the shipped SmolLM2 heads), the tied, scaled fms-extras MLP speculator with a key prefix.
LAYOUTS = [("medusa_old_bias", {"method": "medusa", "num_speculative_tokens": 2}), ("eagle_bias", {}),
           ("eagle_vocab", {}), ("eagle3_no_head", {}), ("medusa_vocab", {}), ("mlp_tied", {})]


@pytest.mark.parametrize("draft,extra", LAYOUTS, ids=[d for d, _ in LAYOUTS])
def test_checkpoint_layouts_same_drafts_on_v1_and_mrv2(tiny, baseline, draft, extra):
    spec = _spec(tiny, draft, **extra)
    runs = {runner: run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:4], max_tokens=32,
                               env=POLICY_OFF, runner=runner) for runner in ("v1", "v2")}
    assert MRV2_LINE in runs["v2"].log and MRV2_LINE not in runs["v1"].log
    for r in runs.values():
        assert r.outputs == [o[:32] for o in baseline.outputs[:4]]
    assert runs["v2"].metrics["accepted"] > 0
    assert runs["v1"].metrics["drafts"] == runs["v2"].metrics["drafts"]
    assert runs["v1"].accepted_per_pos == runs["v2"].accepted_per_pos


def test_openai_server_on_mrv2(tiny, tmp_path):
    import requests

    from tests.e2e.server import metric, openai_server
    from vllm_spec_plugins.testing.engine import default_env
    from vllm_spec_plugins.testing.mrv2 import mrv2_env

    log_path = tmp_path / "server.log"
    with openai_server(str(tiny["target"]), str(tiny["eagle"]), log_path, default_env({**POLICY_OFF, **mrv2_env()}),
                       max_num_seqs=4, timeout=300) as (base, _):
        resp = requests.post(f"{base}/v1/completions", json={
            "model": str(tiny["target"]), "prompt": "hello world, hello world", "max_tokens": 32,
            "temperature": 0.0, "ignore_eos": True}, timeout=300)
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 32
        metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert metric(metrics, "vllm:spec_decode_num_drafts_total") > 0
    assert metric(metrics, "vllm:spec_decode_num_accepted_tokens_total") > 0
    log = log_path.read_text()
    assert MRV2_LINE in log and "runs on Model Runner V2 (PluginEagleSpeculator)" in log
