"""API 2: a recurrent drafter plugin (tests/plugins/compat_api2), checked as the API-2 docs showed.

docs/trace.md of API 2 (schema 2), "Using it in tests": drafts against a plain-torch reference on
``rec["inputs"]``; carried state against a replay of the tokens each request produced
(``sampled_token_ids[row, :valid_count[row]]``, accumulated by ``conformance.replay_tokens``); the state-carry hook
through ``hook_inputs`` / ``hook_outputs``. The state folds the scheduled tokens less the rejected drafts, so with
prompt lookup on, the lookup's drafts verified (and rejected) must reach the hook as the model's would.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from tests.compat_api.conftest import (
    LOOKUP_ON,
    PROMPTS,
    lookup_replaced_model_drafts,
    run_with_defaults,
)
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.conformance import replay_tokens

V = 259
H0 = [0, 4242]


def make_recurrent_checkpoint(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "vsp_compat_rnn", "architectures": ["CompatRecurrentDrafter"], "hidden_size": 128,
        "vocab_size": V, "num_heads": 4}))
    save_file({"h0": torch.tensor(H0)}, str(path / "model.safetensors"))
    return path


def reference_drafts(inputs):
    """Plain torch: the request's last token repeated, or the one after it where the state's sum is a multiple of
    5."""
    last = inputs["next_token_ids"].to(torch.int64)
    first = torch.where(inputs["h"][:, 1] % 5 == 0, (last + 1) % V, last)
    return first[:, None].expand(-1, 4)


def replay_state(tokens):
    """Plain Python: the state after folding a request's sequence ``tokens`` into ``H0``."""
    count, acc = H0
    for t in tokens:
        count += 1
        acc += (t + 1) * count
    return [count, acc]


@pytest.fixture(scope="module")
def recurrent_run(compat_target, tmp_path_factory):
    d = tmp_path_factory.mktemp("api2")
    r = run_with_defaults(compat_target, make_recurrent_checkpoint(d / "draft"), d / "trace")
    return r, load_trace(d / "trace")


def test_greedy_output_unchanged_and_drafts_accepted(recurrent_run, compat_baseline):
    r, records = recurrent_run
    assert r.outputs == compat_baseline.outputs
    assert r.metrics["accepted"] > 0 and records
    assert "plugin 'compatrnn'" in r.log and LOOKUP_ON in r.log


def test_drafts_equal_the_reference_on_the_traced_inputs(recurrent_run):
    _, records = recurrent_run
    compared = 0
    for rec in records:
        assert rec["schema"] >= 2
        got = rec["drafts"]
        want = reference_drafts(rec["inputs"])
        assert got.tolist() == want[:, : got.shape[1]].tolist(), f"step {rec['step']}"
        compared += got.shape[0] if got.shape[1] else 0
    assert compared >= 10, compared
    assert lookup_replaced_model_drafts(records) > 0  # not vacuous: vLLM got the lookup's on some rows


def test_state_equals_a_replay_of_each_requests_tokens(recurrent_run):
    r, records = recurrent_run
    checked = 0
    for rec, produced in zip(records, replay_tokens(records)):
        for row, rid in enumerate(rec["req_ids"]):
            if int(rec["valid_count"][row]) == 0:
                continue  # a partial prefill (none with these prompts)
            req = base_request_id(rid)
            gen, out = produced[req], r.outputs[int(req)]
            n = min(len(gen), len(out))  # (the last step may count tokens past max_tokens that vLLM drops)
            assert gen[:n] == out[:n], f"request {req}: the traced tokens are not its output"
            seq = PROMPTS[int(req)] + gen
            # every token of the sequence is folded, except the one just produced (scheduled next step)
            assert rec["state"]["h"][row].tolist() == replay_state(seq[:-1]), (rec["step"], req, len(seq))
            checked += 1
    assert checked >= 50, checked


def test_the_hook_saw_the_state_before_the_step_and_returned_the_state_after(recurrent_run):
    _, records = recurrent_run
    for rec in records:
        assert set(rec["hook_inputs"]) == {"h", "tokens", "num_sched", "num_rej"} and set(rec["hook_outputs"]) == {"h"}
        produced = rec["valid_count"] > 0
        assert torch.equal(rec["state"]["h"][produced], rec["hook_outputs"]["h"][produced])
        assert torch.equal(rec["state"]["h"][~produced], rec["hook_inputs"]["h"][~produced])
        assert torch.equal(rec["inputs"]["h"], rec["state"]["h"])
