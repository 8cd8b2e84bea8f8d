"""The benchmark harness (bench/engine_worker.py behind bench.run.Engine) on the tiny target."""

from tests.conftest import POLICY_OFF, PROMPTS


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
    finally:
        e.close()
    assert one["outputs"] == four["outputs"] and len(one["outputs"]) == 4
    assert streamed["outputs"][:4] == one["outputs"] and streamed["outputs"] == again["outputs"]  # in prompt order
    assert len(streamed["outputs"]) == 6 and streamed["spec"]["drafts"] > 0
    assert one["tokens"] == sum(map(len, one["outputs"])) and one["seconds"] > 0
    for r in (one, four):  # per-phase deltas of vLLM's cumulative counters
        assert r["spec"]["drafts"] > 0 and r["spec"]["draft_tokens"] == 3 * r["spec"]["drafts"]
        assert sum(r["spec"]["accepted_per_pos"]) == r["spec"]["accepted"] > 0
    assert "served by plugin 'medusa'" in (tmp_path / "tiny-medusa.log").read_text()
