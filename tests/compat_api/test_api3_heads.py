"""API 3: a heads drafter told ``num_drafts`` (tests/plugins/compat_api3), on an engine, checked as the API-3 docs
showed.

docs/hooks.md of API 3: the forward "receives that step's k" as ``num_drafts``, stops after that many heads, and
"the trace records ``num_drafts`` and the columns the forward returned (``forward_columns``)"; docs/trace.md:
``num_drafts`` is "the value it was passed", ``None`` "when the step drafted nothing". So in every step whose
model drafted, the forward was passed ``drafts.shape[1]`` and returned that many columns, and the drafts equal the
heads in plain torch on ``rec["inputs"]``. (With prompt lookup on by default, schemas 5 to 8 recorded the step's k
as ``num_drafts`` where the policy raised it for the lookup's drafts, and the last forward's columns in steps whose
model drafted nothing.) The harness side of API 3: test_api3_harness.py.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from tests.compat_api.conftest import LOOKUP_ON, lookup_replaced_model_drafts, run_with_defaults
from vllm_spec_plugins.runtime.trace import load_trace
from vllm_spec_plugins.testing.fixtures import target_lm_head

H, V, HEADS = 128, 259, 4


def make_heads_checkpoint(path, target):
    """Small residual heads over the target's lm_head: head 0 mostly drafts the target's last token again."""
    g = torch.Generator().manual_seed(3)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "vsp_compat_heads", "architectures": ["CompatHeadsDrafter"], "hidden_size": H,
        "vocab_size": V, "num_heads": HEADS}))
    save_file({"heads": torch.randn(HEADS, H, H, generator=g) * 0.05,
               "lm_head": target_lm_head(target).float().contiguous()}, str(path / "model.safetensors"))
    return path


def reference_drafts(draft, hidden_states):
    """The heads in plain torch: ``[num_reqs, HEADS]``."""
    sd = load_file(str(draft / "model.safetensors"))
    h = hidden_states.float()
    return torch.stack([F.linear(h + F.silu(F.linear(h, sd["heads"][i])), sd["lm_head"]).argmax(-1)
                        for i in range(HEADS)], dim=1)


@pytest.fixture(scope="module")
def heads_run(compat_target, tmp_path_factory):
    d = tmp_path_factory.mktemp("api3")
    draft = make_heads_checkpoint(d / "draft", compat_target)
    r = run_with_defaults(compat_target, draft, d / "trace")
    return draft, r, load_trace(d / "trace")


def test_greedy_output_unchanged_and_drafts_accepted(heads_run, compat_baseline):
    _, r, records = heads_run
    assert r.outputs == compat_baseline.outputs
    assert r.metrics["accepted"] > 0 and records
    assert "plugin 'compatheads'" in r.log and LOOKUP_ON in r.log


def test_the_forward_was_told_k_and_returned_k_columns(heads_run):
    _, _, records = heads_run
    drafted = [rec for rec in records if rec["drafts"].shape[1]]
    assert drafted
    for rec in records:
        k = rec["drafts"].shape[1]
        if k:
            assert rec["num_drafts"] == rec["forward_columns"] == k, (rec["step"], rec["num_drafts"],
                                                                      rec["forward_columns"], k)
        else:
            assert rec["num_drafts"] is None and rec["forward_columns"] is None, rec["step"]


def test_drafts_equal_the_heads_in_plain_torch(heads_run):
    draft, _, records = heads_run
    compared = 0
    for rec in records:
        got = rec["drafts"]
        want = reference_drafts(draft, rec["inputs"]["hidden_states"])
        assert got.tolist() == want[:, : got.shape[1]].tolist(), f"step {rec['step']}"
        compared += got.shape[0] if got.shape[1] else 0
    assert compared >= 10, compared
    assert lookup_replaced_model_drafts(records) > 0  # not vacuous: vLLM got the lookup's on some rows
