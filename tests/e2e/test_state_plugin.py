"""A state-carrying drafter on a real engine: state keyed by request id, through preemption and aborts.

The fixture plugin (``tests/plugins/state_drafter``, installed as a distribution)
carries ``[count, hash, last]`` of each request's generated tokens and proposes
``last`` repeated. The shim's trace records, at every drafting step, each row's
request id and the state the forward saw; we check it against what each request
really generated. The engine run is the conformance suite's (vllm_spec_plugins.testing.conformance:
the same prompts, schedule and 3-block cache); the suite's own checks run on it too, with a
reference for the drafts and a replay of the state.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from vllm_spec_plugins.testing.conformance import MAX_TOKENS, ConformanceSuite

# The suite's schedule (conformance.SCHEDULE): requests 1, 2 and 4 are aborted mid-stream; 6 and 7 join
# later; 7 runs last and alone.


def _fold(h: int, tokens) -> int:
    for t in tokens:
        h = (h * 1000003 + int(t) + 1) % (2**31 - 1)
    return h


class TestStatePlugin(ConformanceSuite):
    num_speculative_tokens = 3
    policy = "adaptive"  # preemption and aborts with the adaptive drafting policy on (k=0 steps carry state)

    def make_draft(self, path, target):
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps({
            "model_type": "vsp_state_test", "architectures": ["StateTestDrafter"], "hidden_size": 128,
            "vocab_size": 259, "num_heads": 4}))
        save_file({"one": torch.ones(1)}, str(path / "model.safetensors"))
        return path

    def reference(self, record, draft, target):
        return record["state"]["acc"][:, 2:3].expand(-1, 3)  # it proposes the last token of its state

    def replay_state(self, prompt, generated, draft):
        return {"acc": torch.tensor([len(generated), _fold(0, generated), generated[-1] if generated else 0])}

    @pytest.fixture
    def run(self, vsp_run):
        return vsp_run["result"], vsp_run["records"]

    def test_preemption_happened_and_drafts_were_accepted(self, run):
        r, _ = run
        assert r.metrics["preemptions"] > 0
        assert r.metrics["accepted"] > 0
        assert sorted(r.finished) == ["0", "3", "5", "6", "7"]
        assert all(len(r.finished[i]) == MAX_TOKENS for i in r.finished)

    def test_state_seen_equals_what_each_request_generated(self, run):
        r, records = run
        checked = drafted = 0
        for rec in records:
            for row, rid in enumerate(rec["req_ids"]):
                req = rid.split("-")[0]
                count, h, last = (int(x) for x in rec["acc"][row])
                if req not in r.finished:
                    continue  # aborted: no final output to compare with
                out = r.finished[req]
                # In the final step vLLM may count tokens past max_tokens that it then drops.
                if count > len(out):
                    assert count <= len(out) + 3
                    continue
                assert h == _fold(0, out[:count]), f"request {req}: state hash wrong at count {count}"
                if count:
                    assert last == out[count - 1]
                    assert int(rec["next_token_ids"][row]) == last
                    if rec["drafts"].shape[1]:  # k=0 (the drafting policy's plain steps): state carried, no forward
                        assert int(rec["drafts"][row, 0]) == last  # the drafts come from the carried state
                        drafted += 1
                checked += 1
        assert checked > 200 and drafted > 0

    def test_finished_and_aborted_requests_free_their_state(self, run):
        _, records = run
        last = records[-1]
        assert [r.split("-")[0] for r in last["req_ids"]] == ["7"]
        assert last["live_state_slots"] == 1
        assert max(rec["live_state_slots"] for rec in records) <= 2 * 4

    def test_trace_schema_records_the_state_carry_hook(self, run):
        """Schema 2 (and later): the hook's inputs (state before the step) and outputs, and the state forward
        saw."""
        from vllm_spec_plugins.runtime.trace import TRACE_SCHEMA

        _, records = run
        hooked = 0
        for rec in records:
            assert rec["schema"] == TRACE_SCHEMA == 9 and rec["plugin"] == "statetest" and rec["kind"] == "heads"
            assert all(isinstance(r, str) for r in rec["req_ids"])
            assert set(rec["hook_inputs"]) == {"acc", "sampled", "num_new"} and set(rec["hook_outputs"]) == {"acc"}
            assert torch.equal(rec["hook_inputs"]["num_new"], rec["valid_count"])
            assert torch.equal(rec["hook_inputs"]["sampled"], rec["sampled_token_ids"])
            produced = rec["valid_count"] > 0
            # rows that produced tokens take the hook's output; the others keep the state they had
            assert torch.equal(rec["state"]["acc"][produced], rec["hook_outputs"]["acc"][produced])
            assert torch.equal(rec["state"]["acc"][~produced], rec["hook_inputs"]["acc"][~produced])
            assert torch.equal(rec["inputs"]["acc"], rec["state"]["acc"])
            hooked += int(produced.sum())
        assert hooked > 200


class TestStatePluginMRV2(TestStatePlugin):
    """The same suite and checks on vLLM's Model Runner V2: MRV2 frees a preempted request's slot and
    sends it back as a new request, so its carried state is parked and restored (``on_preempt="keep"``);
    finished and aborted requests leave no slot behind. The adaptive policy is on (k varies)."""

    runner = "v2"

    def test_ran_on_mrv2_and_the_policy_varied_k(self, run):
        r, records = run
        assert "Using V2 Model Runner" in r.log and "runs on Model Runner V2 (PluginHeadsSpeculator)" in r.log
        widths = {int(rec["drafts"].shape[1]) for rec in records}
        assert {0, 3} <= widths, widths  # the policy's start-up exploration: K, then plain steps


class TestStatePlugin034(TestStatePluginMRV2):
    """The same suite and checks on vLLM 0.34 (Model Runner V2 only; the plugin declared to vLLM's speculator
    registry, preempted requests' state still parked by the shim: 0.34 tells speculators of finished requests only)."""

    vllm = "0.34"

    def test_ran_on_mrv2_and_the_policy_varied_k(self, run):  # 0.34 logs no runner choice: it has one
        r, records = run
        assert "v0.34.0" in r.log and "runs on Model Runner V2 (PluginHeadsSpeculator)" in r.log
        widths = {int(rec["drafts"].shape[1]) for rec in records}
        assert {0, 3} <= widths, widths
