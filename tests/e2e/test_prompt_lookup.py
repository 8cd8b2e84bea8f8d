"""Prompt-lookup (n-gram) drafts beside a plugin drafter (``VLLM_SPEC_PLUGINS_PROMPT_LOOKUP``, runtime/lookup.py).

A heads drafter (Medusa) and an attention drafter (EAGLE-1), on both model runners, with the policy pinned off
(K=3 every step). The tiny random target repeats itself, as small models do, so lookup finds matches.

Oracles: greedy output equals no speculation; every request's lookup drafts equal a plain-Python prompt lookup
over its true tokens (prompt + output) at that step, and a request without a match keeps the plugin's drafts;
MRV2 drafts what V1 drafts, request by request; lookup raises the accepted count over the plugin alone.
"""

from __future__ import annotations

import pytest

from tests.conftest import EAGLE_LENGTHS, PROMPTS
from vllm_spec_plugins.runtime.lookup import ENV_LOOKUP, LOOKUP, MODEL, reference_lookup
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.engine import run_engine

K = 3


def _run(tiny, tmp_path_factory, kind: str, runner: str, lookup: str | None = "on"):
    trace = tmp_path_factory.mktemp(f"trace-{kind}-{runner}-{lookup}")
    spec = {"model": str(tiny[kind]), "num_speculative_tokens": K}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS,
                   env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), ENV_LOOKUP: lookup,
                        "VLLM_SPEC_PLUGINS_POLICY": "off"}, runner=runner)
    return r, load_trace(trace)


@pytest.fixture(scope="module")
def runs(tiny, tmp_path_factory):
    cache: dict[tuple[str, ...], tuple] = {}

    def get(*key: str):
        if key not in cache:
            cache[key] = _run(tiny, tmp_path_factory, *key)
        return cache[key]

    return get


@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_output_equals_no_speculation_and_lookup_drafts_equal_the_reference(runs, kind, runner,
                                                                           baseline_eagle_lengths):
    r, records = runs(kind, runner)
    assert r.outputs == baseline_eagle_lengths.outputs
    assert r.metrics["accepted"] > 0
    assert "prompt-lookup drafts (n-grams of 2 to 4 tokens)" in r.log
    lookup_rows = model_rows = 0
    rates: dict[str, list[float]] = {}  # per request: running rates of [model, lookup] drafts, recomputed here
    source: dict[str, tuple[int, int]] = {}  # per request: who drafted the drafts being verified, and how many
    for rec in records:
        for b, rid in enumerate(rec["req_ids"]):  # what this step verified (tokens produced: accepted + 1)
            produced = int(rec["valid_count"][b])
            src, drafted = source.get(rid, (0, 0))
            if src and drafted and produced:
                pair = rates.setdefault(rid, [0.5, 0.5])
                pair[src - 1] = 0.7 * pair[src - 1] + 0.3 * min(1.0, (produced - 1) / drafted)
            if produced:
                source[rid] = (0, 0)
        if rec["lookup"] is None:
            assert rec["returned_drafts"].shape[1] == 0  # only steps without drafts choose nothing
            continue
        k = rec["returned_drafts"].shape[1]
        assert rec["drafts"].shape[1] == k  # the policy is off: the model drafted all of them (trace schema 9)
        for b, rid in enumerate(rec["req_ids"]):
            i = int(base_request_id(rid))
            seq = PROMPTS[i] + r.outputs[i]
            n = int(rec["lookup_next_positions"][b]) + 1
            chosen = int(rec["lookup"][b])
            model_rate, lookup_rate = rates.setdefault(rid, [0.5, 0.5])
            assert rec["lookup_rates"][b].tolist() == pytest.approx([model_rate, lookup_rate], abs=1e-5)
            source[rid] = (chosen, k)
            if n > len(seq):  # past the request's last token (drafts verified after max_tokens are cut off)
                continue
            ref = reference_lookup(seq[:n], k, 2, 4)
            # the lookup's drafts where it found a match and has paid at least as well as the plugin's
            assert chosen == (LOOKUP if ref is not None and lookup_rate >= model_rate else MODEL), (rec["step"], rid)
            if chosen == LOOKUP:
                assert rec["returned_drafts"][b].tolist() == ref, (rec["step"], rid, n)
                lookup_rows += 1
            else:  # the model's drafts, which the trace's drafts always are
                assert rec["returned_drafts"][b].tolist() == rec["drafts"][b].tolist(), (rec["step"], rid)
                model_rows += 1
    assert lookup_rows >= 50 and model_rows >= 50, (lookup_rows, model_rows)

@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_mrv2_drafts_what_v1_drafts(runs, kind):
    def per_request(records):
        out: dict[str, list] = {}
        for rec in records:
            if rec["lookup"] is None:
                continue
            for b, rid in enumerate(rec["req_ids"]):
                out.setdefault(base_request_id(rid), []).append(
                    (int(rec["lookup_next_positions"][b]), int(rec["lookup"][b]), rec["drafts"][b].tolist(),
                     rec["returned_drafts"][b].tolist()))
        return out

    v1, v2 = per_request(runs(kind, "v1")[1]), per_request(runs(kind, "v2")[1])
    assert v1 == v2 and sum(len(v) for v in v1.values()) >= 100


def test_lookup_raises_acceptance_over_the_plugin_alone(runs):
    with_lookup, _ = runs("medusa", "v1")
    # the variable unset (auto) with the policy off: no lookup (it pays where each source is verified at its own k)
    alone, records = runs("medusa", "v1", None)
    assert all(rec["lookup"] is None for rec in records)  # off: no choice is made
    assert ("no prompt-lookup drafts beside those of plugin 'medusa'" in alone.log
            and "the adaptive policy does not choose k here (VLLM_SPEC_PLUGINS_POLICY=off)" in alone.log), alone.log[-3000:]
    assert with_lookup.outputs == alone.outputs
    # per draft token verified, and in all: the tiny target repeats itself, which the tiny Medusa cannot predict
    assert with_lookup.metrics["accepted"] > 1.5 * alone.metrics["accepted"], (with_lookup.metrics, alone.metrics)
    assert (with_lookup.metrics["accepted"] / with_lookup.metrics["draft_tokens"]
            > alone.metrics["accepted"] / alone.metrics["draft_tokens"])


def test_tensor_parallel_2_ranks_draft_alike(runs, tiny, tmp_path, baseline_eagle_lengths):
    """Every rank keeps its own token table and rates: both must draft what TP=1 drafts."""
    trace = tmp_path / "trace"
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": K}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=EAGLE_LENGTHS,
                   tensor_parallel_size=2, env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), ENV_LOOKUP: "on",
                                                "VLLM_SPEC_PLUGINS_POLICY": "off"})
    assert r.outputs == baseline_eagle_lengths.outputs
    tp1 = runs("medusa", "v1")[0]
    assert r.metrics["accepted"] == tp1.metrics["accepted"] and r.metrics["drafts"] == tp1.metrics["drafts"]
    ranks = [load_trace(trace, rank=rank) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    chosen = 0
    for a, b in zip(*ranks):
        assert a["req_ids"] == b["req_ids"] and a["drafts"].tolist() == b["drafts"].tolist()
        assert a["returned_drafts"].tolist() == b["returned_drafts"].tolist()
        assert (a["lookup"] is None) == (b["lookup"] is None)
        if a["lookup"] is not None:
            assert a["lookup"].tolist() == b["lookup"].tolist()
            chosen += int((a["lookup"] == LOOKUP).sum())
    assert chosen >= 50
