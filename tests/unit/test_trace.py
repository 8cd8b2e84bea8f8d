"""The trace record schema: plain data that loads with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import dataclasses
import types

import torch

from vllm_spec_plugins import Drafter, ExtraInput, Source, StateSpec
from vllm_spec_plugins.runtime import trace
from vllm_spec_plugins.runtime.inputs import Binding
from vllm_spec_plugins.runtime.state import StatePool


def _proposer(tmp_path):
    d = Drafter(architectures=("X",), model_class="m:X", plugin="toy", dist_label="vsp-toy 1.0",
                extra_inputs=(ExtraInput(name="sampled", source=Source.SAMPLED_TOKEN_IDS),),
                state=(StateSpec(name="acc", shape=(2,), dtype="int64"),))
    pool = StatePool([("acc", (2,), torch.int64, 0.0, "keep")], 4, torch.device("cpu"))
    pool.slots_for(["a-1234", "b-5678"])
    buffers = {Source.TARGET_HIDDEN_LAST: torch.arange(8.0).view(4, 2), ("state", "acc"): torch.ones(4, 2).long(),
               Source.TARGET_HIDDEN_ALL: torch.zeros(16, 2)}
    fwd = [Binding("hidden_states", Source.TARGET_HIDDEN_LAST), Binding("acc", Source.STATE, "acc"),
           Binding("all_hidden", Source.TARGET_HIDDEN_ALL)]
    return types.SimpleNamespace(
        drafter=d, pool=pool, buffers=buffers, forward_bindings=fwd, _trace_n=7, _trace_dir=str(tmp_path),
        vllm_config=types.SimpleNamespace(parallel_config=types.SimpleNamespace(rank=0)),
        _trace_hook={"hook_inputs": {"acc": torch.zeros(2, 2).long()}, "hook_outputs": {"acc": torch.ones(2, 2)}},
        _step={"req_ids": ["a-1234", "b-5678", "c-0"], "valid_count": torch.tensor([2, 0, 1], dtype=torch.int32),
               "sampled_token_ids": torch.tensor([[5, 6], [-1, -1], [7, -1]], dtype=torch.int32)})


def test_record_loads_with_weights_only(tmp_path):
    p = _proposer(tmp_path)
    path = trace.save_record(p, 2, 3, torch.tensor([[1, 2], [3, 4]]), {"query_start_loc": torch.tensor([0, 2, 3]),
                                                                       "token_indices_to_sample": None})
    assert p._trace_hook is None  # consumed: the next step records its own hook call
    rec = torch.load(path, weights_only=True)
    assert rec["schema"] == trace.TRACE_SCHEMA == 9
    assert (rec["step"], rec["plugin"], rec["distribution"], rec["kind"]) == (7, "toy", "vsp-toy 1.0", "heads")
    assert rec["req_ids"] == ["a-1234", "b-5678"]
    assert rec["valid_count"].tolist() == [2, 0] and rec["sampled_token_ids"].tolist() == [[5, 6], [-1, -1]]
    assert rec["inputs"]["hidden_states"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert rec["inputs"]["all_hidden"].shape == (3, 2)  # token rows: T of them
    assert torch.equal(rec["hidden_states"], rec["inputs"]["hidden_states"])  # schema 1 keys kept
    assert rec["state"]["acc"].tolist() == [[1, 1], [1, 1]] and rec["live_state_slots"] == 2
    assert rec["hook_inputs"]["acc"].tolist() == [[0, 0], [0, 0]] and rec["hook_outputs"]["acc"].shape == (2, 2)
    assert rec["query_start_loc"].tolist() == [0, 2, 3] and rec["token_indices_to_sample"] is None
    assert trace.load_trace(tmp_path)[0]["step"] == 7
    assert rec["num_drafts"] is None and rec["forward_columns"] is None  # a forward without num_drafts (set below)
    p.takes_num_drafts, p._forward_columns = True, 3
    rec = torch.load(trace.save_record(p, 2, 3, torch.tensor([[1, 2], [3, 4]])), weights_only=True)
    assert (rec["num_drafts"], rec["forward_columns"]) == (2, 3)  # told k=2, returned 3 columns (cut to 2)
    empty = torch.load(trace.save_record(p, 2, 3, torch.zeros(2, 0, dtype=torch.int64)), weights_only=True)
    assert (empty["num_drafts"], empty["forward_columns"]) == (None, None)  # k = 0: no forward ran
    assert (empty["first_pass"], empty["caught_up"], empty["trimmed"], empty["kv_only"]) == (
        None, None, None, None)  # heads: no first pass
    p.drafter = dataclasses.replace(p.drafter, kind="attention")
    p._step.update(first_pass="skipped", caught_up=5, trimmed=2, kv_only=3)
    rec = torch.load(trace.save_record(p, 2, 3, torch.zeros(2, 0, dtype=torch.int64)), weights_only=True)
    assert (rec["first_pass"], rec["caught_up"], rec["trimmed"], rec["kv_only"]) == ("skipped", 5, 2, 3)
    assert (rec["lookup"], rec["lookup_next_positions"], rec["lookup_rates"], rec["lookup_verified"]) == (
        None, None, None, None)  # lookup off
    p.lookup = types.SimpleNamespace(chosen=torch.tensor([2, 1, 1]), rates=torch.tensor([[0.5, 0.5], [0.8, 0.2],
                                                                                       [0.5, 0.5]]),
                                     verified=torch.tensor([2, 0, 1]))
    p._step["lookup"] = (torch.tensor([4, 0, 1]), torch.tensor([10, 20, 30]))
    rec = torch.load(trace.save_record(p, 2, 3, torch.tensor([[1, 2], [3, 4]])), weights_only=True)
    assert rec["lookup"].tolist() == [2, 1] and rec["lookup_next_positions"].tolist() == [10, 20]
    assert rec["lookup_rates"].tolist() == [[0.5, 0.5], [0.800000011920929, 0.20000000298023224]]
    assert rec["lookup_verified"].tolist() == [2, 0]
    assert rec["lookup_model_k"] is None  # not resolved this step (the proposer sets it when it drafts)
    p._step["drafted_by_model"] = 1
    rec = torch.load(trace.save_record(p, 2, 3, torch.tensor([[1, 2], [3, 4]])), weights_only=True)
    assert rec["lookup_model_k"] == 1


def test_drafts_are_the_models_and_returned_drafts_what_vllm_got(tmp_path):
    """Schema 9: ``drafts`` keeps its schema 1-4 meaning, the model's drafts (before prompt lookup's composition);
    ``returned_drafts`` is what the step returned. ``num_drafts`` / ``forward_columns`` describe the model's
    forward: what it was passed (the model's k) and ``None`` where it did not run."""
    p = _proposer(tmp_path)
    p.takes_num_drafts, p._forward_columns = True, 3
    returned = torch.tensor([[7, 8, 9], [3, 0, 0]])  # row 0 took lookup's drafts; the policy raised k from 1 to 3
    rec = trace.build_record(p, 2, 3, returned, model_drafts=torch.tensor([[1], [3]]))
    assert rec["drafts"].tolist() == [[1], [3]] and rec["returned_drafts"].tolist() == [[7, 8, 9], [3, 0, 0]]
    assert (rec["num_drafts"], rec["forward_columns"]) == (1, 3)
    rec = trace.build_record(p, 2, 3, returned, model_drafts=torch.zeros(2, 0, dtype=torch.int64))
    assert rec["drafts"].shape == (2, 0) and rec["returned_drafts"].shape == (2, 3)  # lookup's drafts alone
    assert (rec["num_drafts"], rec["forward_columns"]) == (None, None)  # the forward did not run: nothing stale
    rec = trace.build_record(p, 2, 3, returned)  # no composition: the drafts returned are the model's
    assert rec["drafts"].tolist() == rec["returned_drafts"].tolist() == returned.tolist()
    assert rec["num_drafts"] == 3


def test_base_request_id():
    assert trace.base_request_id("3-9f8e7d6c") == "3"
    assert trace.base_request_id("req-1-9f8e7d6c") == "req-1"
    assert trace.base_request_id("plain") == "plain"


def test_sampled_token_ids_padded_to_k_plus_1(tmp_path):
    p = _proposer(tmp_path)
    p.num_speculative_tokens = 3
    p._step["sampled_token_ids"] = torch.tensor([[5], [6], [7]], dtype=torch.int32)  # a step without drafts
    rec = trace.build_record(p, 2, 3, torch.zeros(2, 3, dtype=torch.int64))
    assert rec["sampled_token_ids"].tolist() == [[5, -1, -1, -1], [6, -1, -1, -1]]
