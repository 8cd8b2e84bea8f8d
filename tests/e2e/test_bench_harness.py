"""The benchmark harness (bench/engine_worker.py behind bench.run.Engine) on the tiny target."""

import pytest

from tests.conftest import POLICY_OFF, PROMPTS
from tests.e2e.counting_site import counting_site

#: Prompts longer than a KV block (128 tokens on vLLM's CPU build), distinct from their second token on: a run
#: that repeats them finds their first block in vLLM's prefix cache unless the cache was emptied.
LONG = [[1] + [(7 * i + 3 * j) % 200 + 20 for j in range(150)] for i in range(3)]


def test_engine_worker_protocol_and_metric_deltas(tiny, tmp_path):
    from bench.run import Engine

    # every step drafts 3 tokens (policy off), so the counters' arithmetic below is exact
    e = Engine("tiny-medusa", str(tiny["target"]), {"model": str(tiny["medusa"]), "num_speculative_tokens": 3},
               POLICY_OFF, tmp_path, max_num_seqs=4, max_model_len=512)
    try:
        assert e.ready["ready"] and e.start_seconds > 0
        one = e.run(PROMPTS[:4], 1, 32)
        four = e.run(PROMPTS[:4], 4, 32)
        streamed = e.run(PROMPTS[:6], 2, 32, stream=True)  # two in flight over six prompts, twice the same ids
        again = e.run(PROMPTS[:6], 2, 32, stream=True)
        lengths = [2, 9, 4, 7, 3, 5]  # --lengths varied: an answer length per prompt
        varied = [e.run(PROMPTS[:6], 2, lengths, stream=True), e.run(PROMPTS[:6], 2, lengths)]
        cached = [e.run(LONG, 1, 8), e.run(LONG, 1, 8)]  # the second finds every prompt's first block cached
        fresh = e.run(LONG, 1, 8, fresh_prefix_cache=True)
    finally:
        e.close()
    assert one["outputs"] == four["outputs"] and len(one["outputs"]) == 4
    assert streamed["outputs"][:4] == one["outputs"] and streamed["outputs"] == again["outputs"]  # in prompt order
    assert len(streamed["outputs"]) == 6 and streamed["spec"]["drafts"] > 0
    for r in varied:  # greedy: each answer the first tokens of the longer one (ended by EOS or its own length)
        assert r["outputs"] == [full[:n] for full, n in zip(streamed["outputs"], lengths)]
    assert one["tokens"] == sum(map(len, one["outputs"])) and one["seconds"] > 0
    for r in (one, four):  # per-phase deltas of vLLM's cumulative counters
        assert r["spec"]["drafts"] > 0 and r["spec"]["draft_tokens"] == 3 * r["spec"]["drafts"]
        assert sum(r["spec"]["accepted_per_pos"]) == r["spec"]["accepted"] > 0
    assert "served by plugin 'medusa'" in (tmp_path / "tiny-medusa.log").read_text()
    # --prefix-cache fresh: the same prompts again find nothing cached
    assert cached[0]["prefix_cache_hits"] == 0 and cached[1]["prefix_cache_hits"] >= 128 * len(LONG)
    assert fresh["prefix_cache_hits"] == 0
    assert fresh["outputs"] == cached[0]["outputs"] == cached[1]["outputs"]


def test_engine_worker_stops_when_vllm_keeps_its_prefix_cache(tiny, tmp_path, monkeypatch):
    """A phase asked to start with the prefix cache emptied must not run on a cache vLLM did not empty (its
    ``reset_prefix_cache`` answers False while requests are running): the worker stops, naming the cause."""
    from bench.run import Engine

    env, _ = counting_site(tmp_path, monkeypatch, [], """
def _refuse(mod):
    mod.LLM.reset_prefix_cache = lambda self, *a, **k: False


when_imported("vllm.entrypoints.llm", _refuse)
""")
    e = Engine("tiny-refuses-reset", str(tiny["target"]), None, env, tmp_path, max_num_seqs=4, max_model_len=512)
    try:
        assert e.run(LONG, 1, 4)["outputs"]  # a phase that keeps the cache runs
        with pytest.raises(RuntimeError, match="died"):
            e.run(LONG, 1, 4, fresh_prefix_cache=True)
    finally:
        e.close()
    assert "vLLM did not empty the prefix cache" in (tmp_path / "tiny-refuses-reset.log").read_text()
