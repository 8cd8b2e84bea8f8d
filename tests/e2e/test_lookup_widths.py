"""Prompt lookup beside a plugin drafter, by default (``VLLM_SPEC_PLUGINS_PROMPT_LOOKUP`` unset: ``auto``), with the
adaptive policy on (both runners, synchronous scheduling): the
runner tells the scheduler which requests' drafts are the lookup's (patches 20/22 and 21); the policy keeps their
acceptance apart, verifies them at the k they pay for, and the model's at the model's own k, which the runner drafts
(0: lookup's drafts alone; MRV2 learns it through patch 23).

Medusa and EAGLE-1 on the tiny target: the tiny target repeats itself, which lookup predicts and the tiny drafts do
not. The policy's step costs come from a cost model (drafting k tokens costs 1 + k/3 plain steps), not the wall clock.

Oracles: greedy output equals no speculation; the drafts the policy counts as the lookup's, verified and accepted,
equal those the trace shows verified in the step after the runner chose lookup for that request (so each source
reached the scheduler with its request); a request's model drafts are never verified past the number the model
drafted; in the steps whose k the policy raised for the lookup's drafts, a request with a match took them exactly
where its lookup rate times k was at least its model rate times the model's k: in steps drafted from lookup alone every
request with a match (also where its lookup had fallen behind its model), elsewhere also some whose lookup was behind
per draft. MRV2 drafts what V1 drafts, step by step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import EAGLE_LENGTHS, PROMPTS
from vllm_spec_plugins.runtime.lookup import ENV_LOOKUP, LOOKUP, MODEL, reference_lookup
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.engine import run_engine

ROOT = Path(__file__).resolve().parents[2]
K = 3
#: prompt lookup as a user gets it: the variable unset (``auto``: on with the adaptive policy and synchronous scheduling)
POLICY_ENV = {"VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.3333",
              ENV_LOOKUP: None}


_RUNS: dict[tuple[str, int, str], tuple] = {}


def _run(tiny, tmp_path_factory, runner: str, tp: int = 1, kind: str = "medusa"):
    """One engine per (kind, tp, runner) and test module (its trace and statistics shared by the tests below)."""
    key = (kind, tp, runner)
    if key not in _RUNS:
        d = tmp_path_factory.mktemp(f"widths-{kind}-{tp}-{runner}")
        trace, stats = d / "trace", d / "stats.json"
        spec = {"model": str(tiny[kind]), "num_speculative_tokens": K}
        r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS,
                       env={**POLICY_ENV, "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace),
                            "VLLM_SPEC_PLUGINS_POLICY_STATS": str(stats)}, runner=runner, tensor_parallel_size=tp)
        _RUNS[key] = (r, load_trace(trace), json.loads(stats.read_text()))
    return _RUNS[key]


def _check_choices(rec: dict, seqs: list[list[int]]) -> tuple[int, int]:
    """A step whose ``k`` the policy raised past the model's for the lookup's drafts: each request took the lookup's
    exactly where a plain-Python prompt lookup over its true tokens (``seqs``, by request index) finds a match and
    they are expected to yield as many accepted tokens as the model's (its lookup rate x ``k`` >= its model rate x
    the model's ``k``, in float32 as the lookup compared them; at a model's ``k`` of 0 every match). Returns how many
    took a match whose lookup was behind its model per draft, in steps of the lookup's alone and in the others."""
    k, mk = rec["returned_drafts"].shape[1], rec["lookup_model_k"]
    alone = elsewhere = 0
    for b, rid in enumerate(rec["req_ids"]):
        seq = seqs[int(base_request_id(rid))]
        n = int(rec["lookup_next_positions"][b]) + 1
        if n > len(seq):
            continue  # past the request's last token
        ref = reference_lookup(seq[:n], k, 2, 4)
        rates = rec["lookup_rates"][b]  # [model, lookup]
        wins = bool(rates[1] * k >= rates[0] * mk)
        assert int(rec["lookup"][b]) == (LOOKUP if ref is not None and wins else MODEL), (rec["step"], rid)
        took_behind = ref is not None and wins and bool(rates[1] < rates[0])
        alone += took_behind and mk == 0
        elsewhere += took_behind and mk > 0
    return alone, elsewhere


@pytest.mark.parametrize("kind, tp, runner", [("medusa", 1, "v1"), ("eagle", 1, "v1"), ("medusa", 2, "v1"),
                                              ("medusa", 1, "v2"), ("eagle", 1, "v2"), ("medusa", 2, "v2")])
def test_the_lookup_drafts_reach_the_policy_as_the_lookups(tiny, tmp_path_factory, baseline_eagle_lengths, kind, tp,
                                                           runner):
    """Heads and attention drafters (EAGLE: its first pass skipped in steps where only lookup drafts and nothing is
    verified, caught up before the model drafts again). At tensor parallel 2 the sources travel from the output
    rank's worker process to the engine core with the drafts (pickled on the ``DraftTokenIds``), and ``k_model``
    from the engine core to both workers on the ``SchedulerOutput``. On MRV2 the drafts stay on the device (the
    scheduler gets placeholders) and the sources travel the same way."""
    r, records, stats = _run(tiny, tmp_path_factory, runner, tp, kind)
    assert r.outputs == baseline_eagle_lengths.outputs
    assert f"{ENV_LOOKUP}=auto (the default): prompt-lookup drafts (n-grams of 2 to 4 tokens)" in r.log
    pending: dict[str, tuple[int, int, int]] = {}  # request -> (who drafted its pending drafts, k, model's k)
    verified = accepted = model_verified = 0
    lookup_only = behind = 0
    for rec in records:
        for b, rid in enumerate(rec["req_ids"]):
            n = int(rec["lookup_verified"][b])
            src, k, mk = pending.pop(rid, (0, 0, 0))
            if n and src == LOOKUP:
                verified += n
                accepted += int(rec["valid_count"][b]) - 1
            elif n:
                model_verified += n
                assert n <= mk, (rec["step"], rid, n, mk)  # the model's drafts: never past what the model drafted
        if rec["lookup"] is not None:
            k, mk = rec["returned_drafts"].shape[1], rec["lookup_model_k"]
            # the trace's drafts are the model's alone (schema 9): its mk columns, as vLLM got them where it took them
            assert rec["drafts"].shape[1] == mk, (rec["step"], mk)
            model_rows = rec["lookup"] == MODEL
            assert torch.equal(rec["returned_drafts"][model_rows, :mk], rec["drafts"][model_rows]), rec["step"]
            lookup_only += mk == 0
            pending.update({rid: (int(rec["lookup"][b]), k, mk) for b, rid in enumerate(rec["req_ids"])})
            if mk < k:  # the policy raised k for the lookup's drafts
                behind += _check_choices(rec, [p + o for p, o in zip(PROMPTS, r.outputs)])[0]
    assert lookup_only > 0, "no step drafted from lookup alone"
    assert behind > 0, "no request whose lookup was behind its model took a match in a step of the lookup's alone"
    lk = stats["sources"]["lookup"]
    assert verified >= 50 and model_verified >= 50, (verified, model_verified)
    assert (lk["verified_draft_tokens"], lk["accepted_draft_tokens"]) == (verified, accepted), stats["sources"]
    assert stats["sources"]["model"]["verified_draft_tokens"] == model_verified
    # the lookup's drafts accept more than the model's, and drafted more than the model in some steps
    assert lk["acceptance_per_position"][0] > stats["acceptance_per_position"][0]
    assert stats["lookup_raised_steps"] > 0
    # the steps that verified only the lookup's drafts timed what verifying one costs: the cost model's 1/3 of a
    # plain token
    costs = {b: v["lookup_token_ms"] for b, v in stats["buckets"].items() if "lookup_token_ms" in v}
    assert costs and all(c == pytest.approx(333.3, abs=0.1) for c in costs.values()), stats["buckets"]


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_mrv2_drafts_what_v1_drafts(tiny, tmp_path_factory, kind):
    """The same plugin, prompt lookup and policy (its costs from the cost model) on both runners: every step's
    drafts, sources and model k equal, request by request, so the policy chose the same k at every step."""
    _, v1, s1 = _run(tiny, tmp_path_factory, "v1", 1, kind)
    _, v2, s2 = _run(tiny, tmp_path_factory, "v2", 1, kind)

    def steps(records):  # the steps that drafted: (requests, drafts, sources, the model's k)
        out = []
        for rec in records:
            if rec["returned_drafts"].shape[1] == 0:
                continue
            ids = [base_request_id(r) for r in rec["req_ids"]]
            order = sorted(range(len(ids)), key=lambda b: ids[b])
            out.append(([ids[b] for b in order], rec["drafts"][order].tolist(), rec["returned_drafts"][order].tolist(),
                        None if rec["lookup"] is None else rec["lookup"][order].tolist(), rec["lookup_model_k"]))
        return out

    a, b = steps(v1), steps(v2)
    assert len(a) >= 20 and any(mk == 0 for *_, mk in a)
    assert a == b
    assert s1["sources"] == s2["sources"]


@pytest.fixture(scope="module")
def smollm2_chat():
    """SmolLM2-135M-Instruct, 8 MT-Bench questions, and its greedy answers without speculation (V1)."""
    from bench.run import held_out_prompt_ids
    from bench.smollm2 import ensure_smollm2

    target = ensure_smollm2()
    prompts = held_out_prompt_ids(target, 8, "chat")[0]
    return target, prompts, run_engine(target, prompts=prompts, **SMOLLM2_KW).outputs


SMOLLM2_KW = {"max_tokens": 64, "llm_kwargs": {"max_model_len": 1024, "max_num_seqs": 1}}


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_a_lookup_behind_its_model_per_draft_takes_a_match_it_fills_more_of(tmp_path, smollm2_chat, runner):
    """SmolLM2-135M with the shipped EAGLE-3 draft, one request at a time on MT-Bench questions, the policy on a cost
    model in which a draft token costs a tenth of a plain step: it drafts one model token in most steps and raises
    ``k`` to 2 or 3 for the lookup's drafts. There a request whose lookup is behind its model per draft (accepted at
    0.3 against 0.6) still takes a match where the lookup's ``k`` drafts outweigh the model's one (0.9 against 0.6);
    compared per draft, as before, it took the model's single draft. Greedy output equals no speculation (on V1)."""
    target, prompts, base = smollm2_chat
    draft = ROOT / "bench" / "drafts" / "smollm2-eagle3"
    trace = tmp_path / "trace"
    r = run_engine(target, speculative_config={"model": str(draft), "num_speculative_tokens": K},
                   env={ENV_LOOKUP: None, "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.1",
                        "VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)},
                   prompts=prompts, runner=runner, **SMOLLM2_KW)
    assert r.outputs == base
    seqs = [p + o for p, o in zip(prompts, r.outputs)]
    raised = [rec for rec in load_trace(trace) if rec["lookup"] is not None
              and 0 < rec["lookup_model_k"] < rec["returned_drafts"].shape[1]]
    assert len(raised) >= 20, len(raised)  # the model drafting, the lookup's k raised past it
    assert sum(_check_choices(rec, seqs)[1] for rec in raised) > 0, \
        "no request whose lookup was behind its model per draft took a match it fills more drafts of"
