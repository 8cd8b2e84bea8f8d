"""The ``k = 0`` floor of an attention drafter: skipped first passes, caught up before drafting resumes.

vLLM's static schedule (``num_speculative_tokens_per_batch_size``) drafts nothing while four or more requests
run and K=3 once three are left, so each of the three long requests goes through about 100 plain decode steps
with the draft loaded, then drafts again. In those steps the runtime skips the draft's first pass and keeps
its rows (``runtime/catchup.py``); before drafting resumes it replays them. Both model runners.

Oracles: greedy output equals no speculation; every draft equals a plain-torch EAGLE-1 that sees the draft KV
of every position (V1's trace, replayed as in test_eagle_engine); drafts and acceptance equal the same run with
the first pass run every step (``VLLM_SPEC_PLUGINS_DRAFT_CATCHUP=0``, V1); MRV2 skips and catches up where V1
does, with the same drafts. The replay is shown to depend on the skipped rows: with them zeroed,
drafts after the gap disagree with it.

A step that verifies drafts while the model drafts nothing (prompt lookup's, with the adaptive policy's model ``k``
at 0) is skipped too, its rows trimmed to the accepted drafts at the next step: on V1 drafts equal the first pass
run every step, a control with those rows zeroed changes them, and both workers of TP=2 skip alike; MRV2 skips,
trims and catches up in the same steps as V1, with the same drafts.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import EAGLE_LENGTHS, PROMPTS
from tests.e2e.eagle_reference import replay
from tests.e2e.test_eagle_engine import _records, _reference
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.conformance import drafts_by_position
from vllm_spec_plugins.testing.engine import run_engine
from vllm_spec_plugins.testing.fixtures import make_tiny_eagle

K = 3
#: K drafts while at most 3 requests run, none from 4 up
SCHEDULE = [[1, 3, K], [4, 8, 0]]
#: 32 tokens a step: the prompts' prefill is chunked (a step of chunks is never skipped), and a catch-up of 6
#: requests' 16 rows each is split into passes of at most 32 rows (vLLM's drafting buffers hold that many)
ENGINE = {"max_num_batched_tokens": 32, "max_model_len": 256}


@pytest.fixture(scope="module")
def draft(tiny, tmp_path_factory):
    """An EAGLE-1 draft whose drafts depend on its KV cache and are still accepted. The shared tiny one (random
    weights of scale 0.05) drafts the same tokens whatever its context holds: zeroing the skipped rows changed
    none of its first drafts on this schedule. At 0.12 it changed 57 of 84, and drafts are still accepted (about
    1 in 10; at 0.15, 5 of 426)."""
    return make_tiny_eagle(tmp_path_factory.mktemp("ckpt") / "tiny-eagle-context", tiny["target"], noise=0.12)


def _engine(tiny, draft, tmp_path_factory, runner: str, env: dict[str, str], tensor_parallel_size: int = 1):
    """The engine's result and its trace folder (every rank's records)."""
    trace = tmp_path_factory.mktemp(f"trace-{runner}-tp{tensor_parallel_size}")
    spec = {"model": str(draft), "num_speculative_tokens": K, "num_speculative_tokens_per_batch_size": SCHEDULE}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS,
                   llm_kwargs=ENGINE, env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **env}, runner=runner,
                   tensor_parallel_size=tensor_parallel_size)
    return r, trace


def _run(tiny, draft, tmp_path_factory, runner: str, env: dict[str, str]):
    r, trace = _engine(tiny, draft, tmp_path_factory, runner, env)
    return r, _records(trace)


@pytest.fixture(scope="module")
def skipping_v1(tiny, draft, tmp_path_factory):
    return _run(tiny, draft, tmp_path_factory, "v1", {})  # the default: 16 rows kept per request


@pytest.fixture(scope="module")
def every_step_v1(tiny, draft, tmp_path_factory):
    return _run(tiny, draft, tmp_path_factory, "v1", {"VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"})


@pytest.fixture(scope="module")
def skipping_v2(tiny, draft, tmp_path_factory):
    return _run(tiny, draft, tmp_path_factory, "v2", {})


@pytest.fixture(params=["v1", "v2"])
def runner(request):
    return request.param


@pytest.fixture
def skipping(runner, request):
    return request.getfixturevalue(f"skipping_{runner}")


def test_output_equals_no_speculation(skipping, baseline_eagle_lengths):
    r, _ = skipping
    assert r.outputs == baseline_eagle_lengths.outputs
    assert r.metrics["accepted"] > 0


def test_first_passes_skipped_while_nothing_is_drafted_and_caught_up(skipping):
    _, records = skipping
    skipped = [rec for rec in records if rec["first_pass"] == "skipped"]
    assert len(skipped) >= 80 and all(rec["drafts"].shape[1] == 0 for rec in skipped)
    assert all(len(rec["req_ids"]) >= 4 for rec in skipped)  # only where the schedule said k = 0
    caught = [rec["caught_up"] for rec in records if rec["caught_up"]]
    # every 16 kept rows a request is caught up, then drafting resumes for the last three after their gap
    assert sum(caught) == sum(len(rec["req_ids"]) for rec in skipped) - _dropped(records), caught
    assert ENGINE["max_num_batched_tokens"] < max(caught) <= 16 * 6  # split into passes of at most 32 rows
    assert records[0]["first_pass"] == "ran"  # the chunked prefill (V1's trace shows the chunk: 32 tokens)
    assert "query_start_loc" not in records[0] or int(records[0]["query_start_loc"][-1]) == 32
    resumed = next(i for i, rec in enumerate(records) if rec["drafts"].shape[1] == K and i > 0)
    assert records[resumed]["caught_up"] > 0  # the first drafting step after the gap replays first


def test_passes_whose_outputs_are_discarded_write_the_draft_kv_alone(skipping):
    """API 4: the shipped EAGLE plugin's forward takes ``kv_only``. Every catch-up pass (a step may run several),
    and a step's own first pass while it drafts nothing (the chunked prefill), is told ``kv_only=True`` and writes
    the draft KV without the layer's MLP; a step that drafts, or skips its first pass, tells it nothing. The
    drafts after them equal a reference that runs the whole draft over every position
    (test_drafts_after_the_gap_equal_a_reference_with_the_whole_draft_kv, MRV2 against V1 below)."""
    _, records = skipping
    told = 0
    for rec in records:
        discarded = int(rec["caught_up"] > 0) + int(rec["first_pass"] == "ran" and rec["drafts"].shape[1] == 0)
        assert rec["kv_only"] >= discarded if rec["caught_up"] else rec["kv_only"] == discarded, rec["step"]
        told += rec["kv_only"]
    assert told >= 6 and sum(rec["first_pass"] == "ran" and rec["drafts"].shape[1] == 0 for rec in records) >= 1


def _dropped(records) -> int:
    """Kept rows of requests that finished while kept (never replayed: nothing drafts for them again)."""
    kept: dict[str, int] = {}
    for rec in records:
        if rec["caught_up"]:
            for rid in rec["req_ids"]:
                kept.pop(rid, None)
        if rec["first_pass"] == "skipped":
            for rid in rec["req_ids"]:
                kept[rid] = kept.get(rid, 0) + 1
    live = {rid for rec in records[-1:] for rid in rec["req_ids"]}
    return sum(n for rid, n in kept.items() if rid not in live)


def test_drafts_after_the_gap_equal_a_reference_with_the_whole_draft_kv(skipping_v1, draft, tiny):
    """V1's trace has what the first pass was fed (MRV2's does not): every draft is replayed. MRV2 is held to
    V1's drafts below."""
    _, records = skipping_v1
    ref = _reference(draft, tiny["target"])
    stats = replay(records, ref)
    assert stats["compared"] >= 60
    assert stats["equal"] == stats["compared"], stats
    # The replay can tell: with the skipped rows zeroed, token and hidden state (KV the draft would attend to
    # had it not been caught up), the reference's drafts after the gap disagree with the engine's.
    holes = [dict(rec, next_token_ids=torch.zeros_like(rec["next_token_ids"]),
                  target_hidden_states=torch.zeros_like(rec["target_hidden_states"]))
             if rec["first_pass"] == "skipped" else rec for rec in records]
    broken = replay(holes, ref)
    assert broken["equal"] < broken["compared"] // 2, broken


def test_drafts_and_acceptance_equal_running_the_first_pass_every_step(skipping_v1, every_step_v1):
    r, records = skipping_v1
    r0, records0 = every_step_v1
    assert r0.outputs == r.outputs
    assert not any(rec["first_pass"] == "skipped" for rec in records0)
    assert r.metrics["drafts"] == r0.metrics["drafts"] and r.accepted_per_pos == r0.accepted_per_pos
    drafted = [rec["drafts"] for rec in records if rec["drafts"].shape[1]]
    assert len(drafted) == len([rec for rec in records0 if rec["drafts"].shape[1]])
    assert all(torch.equal(a, b["drafts"]) for a, b in zip(drafted, (x for x in records0 if x["drafts"].shape[1])))


@pytest.fixture(scope="module")
def tp2_v1(tiny, draft, tmp_path_factory):
    return _engine(tiny, draft, tmp_path_factory, "v1", {}, tensor_parallel_size=2)


@pytest.fixture(scope="module")
def tp2_v2(tiny, draft, tmp_path_factory):
    return _engine(tiny, draft, tmp_path_factory, "v2", {}, tensor_parallel_size=2)


def _drafts_by_request(records) -> list[dict[str, list[int]]]:
    return [dict(zip(map(base_request_id, rec["req_ids"]), rec["drafts"].tolist(), strict=True)) for rec in records]


def test_tensor_parallel_2(tiny, draft, baseline_eagle_lengths, runner, request):
    """Two CPU workers decide alike (the skip and the catch-up are host decisions from the same inputs) and each
    replays its own shard of the draft KV, on both runners: output equals no speculation; on V1 every draft
    equals the reference with the whole draft KV, replayed from rank 0's trace (TP=2's sums differ from one
    worker's in the last bits, so its drafts are compared with the reference, not with the one-worker run's).
    MRV2's trace carries no target rows to replay: its drafts equal V1's at TP=2, request by request and token by
    token. Two workers start stepping while the prompts still arrive, so the first steps (and with them where
    the static schedule drafts) differ from run to run by a step or two: the drafts made at the same point of
    the same request are compared, at least 90 % of MRV2's."""
    r, trace = request.getfixturevalue(f"tp2_{runner}")
    assert r.outputs == baseline_eagle_lengths.outputs and r.metrics["accepted"] > 0
    for rank in (0, 1):
        records = load_trace(trace, rank=rank)
        assert sum(rec["first_pass"] == "skipped" for rec in records) >= 80, rank
        assert sum(rec["caught_up"] for rec in records) > 0, rank
    if runner == "v1":
        stats = replay(load_trace(trace, rank=0), _reference(draft, tiny["target"]))
        assert stats["compared"] >= 60 and stats["equal"] == stats["compared"], stats
        return
    _, trace1 = request.getfixturevalue("tp2_v1")
    mine, v1 = drafts_by_position(load_trace(trace, rank=0)), drafts_by_position(load_trace(trace1, rank=0))
    common = mine.keys() & v1.keys()
    assert len(common) >= 0.9 * len(mine) and len(common) >= 60, (len(common), len(mine), len(v1))
    assert all(mine[key] == v1[key] for key in common), [key for key in common if mine[key] != v1[key]]


def test_mrv2_skips_and_catches_up_where_v1_does_with_the_same_drafts(skipping_v1, skipping_v2):
    """V1's drafts equal the first pass run every step (above); MRV2's equal V1's, step by step (MRV2 may order a
    step's requests differently: compared request by request)."""
    (r1, records1), (r2, records2) = skipping_v1, skipping_v2
    assert r2.outputs == r1.outputs
    assert r2.metrics["drafts"] == r1.metrics["drafts"] and r2.accepted_per_pos == r1.accepted_per_pos
    assert [(rec["first_pass"], rec["caught_up"]) for rec in records2] == \
        [(rec["first_pass"], rec["caught_up"]) for rec in records1]
    assert _drafts_by_request(records2) == _drafts_by_request(records1)


def test_a_bad_row_count_stops_the_engine_naming_the_variable(tiny, draft):
    spec = {"model": str(draft), "num_speculative_tokens": K}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:1], max_tokens=4,
                   env={"VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "lots"}, check=False)
    assert r.returncode != 0
    assert "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP='lots' is not a whole number from 0 to 4096" in r.log


def test_eagle3_catches_up_the_combined_target_layers(tiny, tmp_path_factory):
    """EAGLE-3 keeps the target layers' rows uncombined (``[n, 3 * hidden]``) and combines them when it catches
    up: its drafts and acceptance equal the first pass run every step, on V1 and on MRV2. What this can tell: the
    rows' width and the replayed tokens (a wrong width fails the catch-up, the guard turns drafting off, drafts
    differ). Not the combined values themselves: this fixture's attention reads only the token half of its input
    (``make_tiny_eagle3``), so its draft KV does not depend on them (replaying the first ``hidden`` columns
    uncombined gave the same drafts); EAGLE-1's test above covers hidden states reaching the draft KV."""
    runs = {name: _run(tiny, tiny["eagle3"], tmp_path_factory, runner, env) for name, runner, env in (
        ("v1", "v1", {}), ("v1, every step", "v1", {"VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"}), ("v2", "v2", {}))}
    (r, records), (r0, records0) = runs["v1"], runs["v1, every step"]
    assert r.outputs == r0.outputs and r.metrics["accepted"] > 0
    assert sum(rec["first_pass"] == "skipped" for rec in records) >= 80 and sum(rec["caught_up"] for rec in records)
    assert r.metrics["drafts"] == r0.metrics["drafts"] and r.accepted_per_pos == r0.accepted_per_pos
    def drafted(recs) -> list[list[list[int]]]:
        return [rec["drafts"].tolist() for rec in recs if rec["drafts"].shape[1]]

    assert drafted(records) == drafted(records0)
    r2, _ = runs["v2"]
    assert r2.outputs == r.outputs and r2.accepted_per_pos == r.accepted_per_pos


# -- steps that verify drafts while the model drafts nothing (synchronous scheduling) ---------------------------

#: prompt lookup beside the draft, the adaptive policy timed by a cost model (test_lookup_widths): the draft
#: accepts about one in ten, so the model's k is mostly 0 and many steps verify the lookup's drafts alone (and
#: some the model's own, drafted the step before the policy's k fell to 0)
LOOKUP_ENV = {"VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.3333",
              "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP": "on"}
#: a throwaway sitecustomize for the control below: the rows kept from steps that verified drafts, zeroed
ZEROED = '''
import torch
from vllm_spec_plugins.runtime import catchup

_keep = catchup.KeptRows.keep


def keep(self, req_ids, token_ids, positions, slots, hidden, counts=None, first_positions=None):
    if counts is not None:
        token_ids, hidden = torch.zeros_like(token_ids), torch.zeros_like(hidden)
    return _keep(self, req_ids, token_ids, positions, slots, hidden, counts, first_positions)


catchup.KeptRows.keep = keep
'''


def _lookup_run(tiny, draft, tmp_path_factory, env: dict[str, str], tp: int = 1, runner: str = "v1"):
    trace = tmp_path_factory.mktemp("trace-lookup")
    spec = {"model": str(draft), "num_speculative_tokens": K}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS,
                   env={**LOOKUP_ENV, "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **env}, runner=runner,
                   tensor_parallel_size=tp)
    return r, (_records(trace) if tp == 1 else trace)


@pytest.fixture(scope="module")
def lookup_skipping(tiny, draft, tmp_path_factory):
    return _lookup_run(tiny, draft, tmp_path_factory, {})


@pytest.fixture(scope="module")
def lookup_every_step(tiny, draft, tmp_path_factory):
    return _lookup_run(tiny, draft, tmp_path_factory, {"VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"})


def _skipped_verifying(rec) -> bool:
    """A skipped step in which requests verified drafts (their scheduled tokens less one, as prompt lookup counts
    them on both runners)."""
    return rec["first_pass"] == "skipped" and int(rec["lookup_verified"].sum()) > 0


def test_steps_verifying_drafts_while_the_model_drafts_nothing_skip_the_first_pass(
        lookup_skipping, lookup_every_step, baseline_eagle_lengths):
    """The model drafts nothing, drafts are verified (the lookup's): the rows of every verified token are kept,
    those past a request's first rejected draft trimmed at its next step, the rest replayed before the model
    drafts again. Drafts, step by step, and acceptance equal the first pass run every step."""
    (r, records), (r0, records0) = lookup_skipping, lookup_every_step
    assert r.outputs == r0.outputs == baseline_eagle_lengths.outputs
    skipped = [rec for rec in records if _skipped_verifying(rec)]
    assert len(skipped) >= 20, len(skipped)
    assert sum(rec["trimmed"] for rec in records) > 0  # some drafts were rejected, their rows dropped
    assert sum(rec["caught_up"] for rec in records) > 0
    modelled = [i for i, rec in enumerate(records) if rec["first_pass"] == "ran" and rec["lookup_model_k"]]
    assert any(any(_skipped_verifying(rec) for rec in records[:i]) for i in modelled)  # drafted after a skip
    assert not any(rec["first_pass"] == "skipped" for rec in records0)
    assert r.metrics["drafts"] == r0.metrics["drafts"] and r.accepted_per_pos == r0.accepted_per_pos
    # the model's drafts (trace schema 9), and what vLLM got (the lookup's in their place where taken)
    assert [rec["drafts"].tolist() for rec in records] == [rec["drafts"].tolist() for rec in records0]
    assert [rec["returned_drafts"].tolist() for rec in records] == [rec["returned_drafts"].tolist() for rec in records0]


def test_the_drafts_depend_on_the_rows_kept_from_lookup_steps(tiny, draft, tmp_path_factory, lookup_every_step,
                                                              monkeypatch):
    """The comparison above can fail: with the rows kept from steps that verified drafts zeroed (a throwaway
    ``sitecustomize.py``, in an engine started as a new process so that it runs; plain decode steps keep theirs),
    the drafts are no longer those of the first pass run every step."""
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_TEST_FORKSERVER", "0")
    site = tmp_path_factory.mktemp("zeroed")
    (site / "sitecustomize.py").write_text(ZEROED)
    r, records = _lookup_run(tiny, draft, tmp_path_factory, {"PYTHONPATH": str(site)})
    r0, records0 = lookup_every_step
    assert r.outputs == r0.outputs  # the drafts change, never the output: every draft is verified
    assert any(_skipped_verifying(rec) for rec in records)
    assert [rec["drafts"].tolist() for rec in records] != [rec["drafts"].tolist() for rec in records0]


def test_mrv2_skips_the_steps_v1_skips_with_the_same_drafts(tiny, draft, tmp_path_factory, lookup_skipping):
    """Model Runner V2 keeps the verified rows in the same steps (it reads the scheduler's counts from its own
    input batch), trims and catches up the same rows, and drafts what V1 drafts, step by step."""
    r, records = _lookup_run(tiny, draft, tmp_path_factory, {}, runner="v2")
    r1, records1 = lookup_skipping
    assert r.outputs == r1.outputs
    assert sum(_skipped_verifying(rec) for rec in records) >= 20

    def steps(recs):  # per step, the requests' drafts in request order (the runners order a batch differently)
        out = []
        for rec in recs:
            ids = [base_request_id(r) for r in rec["req_ids"]]
            order = sorted(range(len(ids)), key=lambda b: ids[b])
            out.append((rec["first_pass"], rec["caught_up"], rec["trimmed"], [ids[b] for b in order],
                        rec["drafts"][order].tolist(), rec["returned_drafts"][order].tolist()))
        return out

    assert steps(records) == steps(records1)


def test_tensor_parallel_2_skips_the_same_steps_on_both_workers(tiny, draft, tmp_path_factory,
                                                                 baseline_eagle_lengths):
    """Both workers keep, trim and catch up in the same steps: the decisions come from the scheduler's counts,
    which both receive."""
    r, trace = _lookup_run(tiny, draft, tmp_path_factory, {}, tp=2)
    assert r.outputs == baseline_eagle_lengths.outputs
    ranks = [load_trace(trace, rank=rank) for rank in (0, 1)]
    assert sum(_skipped_verifying(rec) for rec in ranks[0]) >= 20 and sum(rec["trimmed"] for rec in ranks[0]) > 0
    assert [(rec["first_pass"], rec["caught_up"], rec["trimmed"]) for rec in ranks[0]] == \
        [(rec["first_pass"], rec["caught_up"], rec["trimmed"]) for rec in ranks[1]]
