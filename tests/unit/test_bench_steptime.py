"""bench.steptime: its summary reads what its wrappers write, and it refuses what it cannot read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import steptime as T


def _so(num, spec=None):
    return SimpleNamespace(num_scheduled_tokens=num, total_num_scheduled_tokens=sum(num.values()),
                           scheduled_spec_decode_tokens=spec or {})


def test_shape_tells_prompt_tokens_from_verified_drafts():
    # a: decoding and verifying 2 drafts (3 tokens), b: a prompt chunk of 40, c: decoding
    assert T.shape(_so({"a": 3, "b": 40, "c": 1}, {"a": [5, 6]})) == (3, 44, 1, 39, 2)


def test_the_core_and_runner_wrappers_write_what_summarize_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_POLICY", "0")
    config = SimpleNamespace(speculative_config=SimpleNamespace(method="eagle3", model="/x/smollm2-eagle3"))

    class Scheduler:
        def schedule(self):
            return self.next

    class EngineCore:
        vllm_config = config

        def __init__(self):
            self.scheduler = Scheduler()

        def step(self):
            return self.scheduler.schedule()

        def post_step(self, model_executed):
            pass

    class GPUModelRunner:
        vllm_config = config

        def execute_model(self, so):
            self._model_forward()

        def sample_tokens(self, grammar):
            self.propose_draft_token_ids()

        def _model_forward(self):
            pass

        def propose_draft_token_ids(self):
            pass

    T._patch_core(SimpleNamespace(EngineCore=EngineCore), str(tmp_path))
    T._patch_runner(SimpleNamespace(GPUModelRunner=GPUModelRunner), str(tmp_path))
    core, runner = EngineCore(), GPUModelRunner()
    for so, post in ((_so({"a": 30}), True), (_so({"a": 1, "b": 1}), False), (_so({"a": 1, "b": 1}), True),
                     (_so({}), False), (_so({"a": 3, "b": 1}, {"a": [5, 6]}), True)):
        core.scheduler.next = so
        core.step()
        if post:
            core.post_step(True)
        runner.execute_model(so)
        runner.sample_tokens(None)
    core.scheduler.next = _so({"a": 1})
    core.step()  # writes the step before it
    [core_file] = tmp_path.glob("core-*.tsv")
    [runner_file] = tmp_path.glob("runner-*.tsv")
    assert core_file.name.startswith("core-eagle3-smollm2-eagle3,policy=0-")
    rows = T.read(core_file, T.CORE_TIMES)
    assert [(r["requests"], r["prompt_tokens"]) for r in rows] == [(1, 29), (2, 0), (2, 0), (2, 0)]  # the empty: none
    assert rows[1]["post_step"] == 0.0 and rows[2]["post_step"] > 0.0  # post_step skipped, then run
    out = T.summarize(core_file)
    assert "4 steps, 29 prompt tokens computed" in out and "decode steps at batch 2 (2)," in out
    assert "decode steps verifying drafts at batch 2 (1, 2.00 drafts a step)" in out
    assert "prefill steps (1)" in out
    rows = T.read(runner_file, T.RUNNER_TIMES)
    assert len(rows) == 4 and all(r["_model_forward"] > 0 and r["propose_draft_token_ids"] > 0 for r in rows)
    assert all(r["execute_model"] >= r["_model_forward"] for r in rows)
    assert "decode steps at batch 2 (2)" in T.summarize(runner_file)


def test_a_line_it_cannot_read_is_refused(tmp_path):
    bad = tmp_path / "core-none-1.tsv"
    bad.write_text("1\t1\t0\t0\t0\t0.1\t0.2\n")
    with pytest.raises(ValueError, match=r"core-none-1\.tsv:1: expected 8 tab-separated fields, found 7"):
        T.summarize(bad)


def test_no_directory_no_wrappers(tmp_path, capsys):
    assert T.install(str(tmp_path / "missing")) is False
    assert "BENCH_STEP_TIME=" in capsys.readouterr().err
    assert T.main([str(tmp_path)]) == 1
