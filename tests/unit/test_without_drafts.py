"""``PluginProposerMixin.propose_without_drafts`` on stand-ins: a V1 plain decode step that drafts nothing is
answered without vLLM's preparation exactly when every condition holds; every other step keeps vLLM's path."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from vllm_spec_plugins.runtime.catchup import KeptRows
from vllm_spec_plugins.runtime.proposer import AttentionProposer, HeadsProposer, PluginProposerMixin

B = 3


def _step(**over):
    """A plain decode step of three requests at k = 0: runner, scheduler output, sampled ids, spec metadata."""
    runner = types.SimpleNamespace(
        use_async_scheduling=False,
        input_batch=types.SimpleNamespace(num_reqs=B, req_ids=["a", "b", "c"],
                                          num_computed_tokens_cpu=np.array([10, 20, 30])),
        discard_request_mask=types.SimpleNamespace(np=np.zeros(8, dtype=bool)),
        positions=torch.tensor([10, 20, 30, 0, 0]), use_aux_hidden_state_outputs=False,
        input_ids=types.SimpleNamespace(gpu=torch.tensor([5, 6, 7, 0, 0], dtype=torch.int32)),
        _get_positions=lambda n: torch.tensor([10, 20, 30, 0, 0])[:n], get_model=lambda: object())
    so = types.SimpleNamespace(num_spec_tokens_to_schedule=0, total_num_scheduled_tokens=B)
    md = types.SimpleNamespace(max_spec_len=0)
    sampled = torch.tensor([[41], [42], [43]], dtype=torch.int32)
    case = {"runner": runner, "so": so, "md": md, "sampled": sampled}
    case.update(over)
    return case


def _proposer(cls, **attrs):
    p = cls.__new__(cls)
    p.guard = types.SimpleNamespace(disabled=False, poll=lambda: None, run=lambda what, fn, *a: (True, fn(*a)),
                                    idle=lambda *a: "idle")
    p.lookup, p.pool, p._trace_dir, p.buffers, p._step, p.kept = None, None, None, {}, {}, None
    p.drafter = types.SimpleNamespace(model_class="M")
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


def _call(p, c):
    return p.propose_without_drafts(c["runner"], c["so"], c["sampled"], torch.arange(10.0).view(5, 2), None,
                                    c["md"], types.SimpleNamespace(max_query_len=1, slot_mapping=torch.arange(100, 105)))


def test_a_heads_drafter_without_state_answers_with_no_drafts():
    p = _proposer(HeadsProposer)
    out = _call(p, _step())
    assert out.shape == (B, 0) and p._step["req_ids"] == ["a", "b", "c"]


def test_an_attention_drafter_keeps_the_rows_its_first_pass_would_consume():
    """The sampled token of each request, its position, its KV slot, the target's hidden state."""
    kept = KeptRows(4, 8, 2, torch.float32, torch.device("cpu"))
    p = _proposer(AttentionProposer, kept=kept)
    p.runner = _step()["runner"]
    out = _call(p, _step())
    assert out.shape == (B, 0) and p._step["first_pass"] == "skipped"
    assert kept.where == {"a": [0, 1], "b": [1, 1], "c": [2, 1]}
    assert kept.token_ids[[0, 8, 16]].tolist() == [41, 42, 43]
    assert kept.positions[[0, 8, 16]].tolist() == [10, 20, 30] and kept.slots[[0, 8, 16]].tolist() == [100, 101, 102]
    assert kept.hidden[[0, 8, 16]].tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]


@pytest.mark.parametrize("case", ["k > 0", "drafts verified", "async", "prompt lookup", "guard off", "a prompt chunk",
                                  "more tokens than requests", "padded batch", "no spec metadata"])
def test_every_other_step_keeps_vllms_path(case):
    """The model drafts; drafts are verified (more than one sampled column, or max_spec_len > 0); async scheduling;
    prompt lookup beside the model (its drafts need vLLM's inputs); the guard turned drafting off (its idle drafts
    are propose's); a request in its prompt that samples nothing (vLLM's backup token); a prompt completing with
    more than one token; a batch padded past its requests; no spec metadata."""
    c = _step()
    p = _proposer(HeadsProposer)
    if case == "k > 0":
        c["so"].num_spec_tokens_to_schedule = 2
    elif case == "drafts verified":
        c["md"].max_spec_len = 2
        c["sampled"] = torch.zeros((B, 3), dtype=torch.int32)
    elif case == "async":
        c["runner"].use_async_scheduling = True
    elif case == "prompt lookup":
        p.lookup = object()
    elif case == "guard off":
        p.guard.disabled = True
    elif case == "a prompt chunk":
        c["runner"].discard_request_mask.np[1] = True
    elif case == "more tokens than requests":
        c["so"].total_num_scheduled_tokens = B + 4
    elif case == "padded batch":
        c["runner"].input_batch.num_reqs = B - 1
    elif case == "no spec metadata":
        c["md"] = None
    assert _call(p, c) is None


@pytest.mark.parametrize("case", ["state", "trace"])
def test_a_heads_drafter_with_state_or_a_trace_runs_propose(case):
    p = _proposer(HeadsProposer, **({"pool": object()} if case == "state" else {"_trace_dir": "/tmp/x"}))
    assert _call(p, _step()) is None


@pytest.mark.parametrize("case", ["catch-up off", "extra inputs", "no room left", "mtp target"])
def test_an_attention_drafter_runs_propose_where_it_cannot_keep_the_rows(case):
    """Catch-up turned off (``VLLM_SPEC_PLUGINS_DRAFT_CATCHUP=0``); a drafter with extra inputs to fill; a request
    at its limit of kept rows (vLLM's path catches up and runs the pass); a target that overrides the hidden states
    fed to drafters (vLLM reads ``get_mtp_target_hidden_states``): nothing kept here."""
    kept = KeptRows(4, 1, 2, torch.float32, torch.device("cpu"))
    p = _proposer(AttentionProposer, kept=None if case == "catch-up off" else kept,
                  buffers={"x": torch.zeros(1)} if case == "extra inputs" else {})
    c = _step()
    p.runner = c["runner"]
    if case == "no room left":
        kept.keep(["b"], torch.zeros(1, dtype=torch.int32), torch.zeros(1), torch.zeros(1), torch.zeros(1, 2))
    if case == "mtp target":
        c["runner"].get_model = lambda: types.SimpleNamespace(get_mtp_target_hidden_states=lambda: None)
    assert _call(p, c) is None
    assert kept.where == ({"b": [0, 1]} if case == "no room left" else {})


def test_the_mixin_alone_keeps_vllms_path():
    """A front end that does not say what to do at k = 0 (the mixin's default)."""
    assert _call(_proposer(type("P", (PluginProposerMixin,), {})), _step()) is None


def test_a_failure_while_keeping_the_rows_turns_drafting_off(caplog):
    """Keeping the rows runs under the guard, as in ``propose``: a failure there is logged once, drafting is off
    for the rest of the engine's life, and the step gets the guard's idle drafts (none)."""
    from tests.unit.test_guard import _guard

    p = _proposer(AttentionProposer, kept=KeptRows(4, 8, 2, torch.float32, torch.device("cpu")))
    p.guard = _guard()
    p.runner = _step()["runner"]

    def broken(*a, **k):
        raise RuntimeError("no room in the kept rows")

    p._skip_first_pass = broken
    with caplog.at_level("ERROR"):
        out = _call(p, _step())
    assert out.shape == (B, 0) and p.guard.disabled
    assert "no room in the kept rows" in caplog.text
    assert _call(p, _step()) is None  # from then on vLLM's path, where propose returns the guard's idle drafts
