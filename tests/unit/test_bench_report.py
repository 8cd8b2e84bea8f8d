"""The benchmark's arithmetic and tables, on synthetic phases (no engine)."""

import pytest

from bench.report import markdown, overhead_markdown
from bench.run import summarize


def phase(tokens, seconds, outputs, spec=None):
    return {"tokens": tokens, "seconds": seconds, "outputs": outputs, "spec": spec or {}}


def test_summarize_medians_paired_speedup_and_acceptance():
    base = [phase(100, 10.0, [[1, 2]]), phase(100, 5.0, [[1, 2]]), phase(100, 10.0, [[1, 2]])]
    spec = {"drafts": 10, "accepted": 6, "accepted_per_pos": [4, 2], "draft_tokens": 20}
    rows = [phase(100, 5.0, [[1, 2]], spec), phase(100, 5.0, [[1, 2]], spec), phase(100, 4.0, [[1, 2]], spec)]
    s = summarize("our Medusa", rows, base, 1)
    assert s["tokens_per_s"] == 20.0
    assert s["speedup_all"] == [2.0, 1.0, 2.5] and s["speedup"] == 2.0  # paired per repetition, then median
    assert s["mean_acceptance_length"] == 1 + 18 / 30
    assert s["acceptance_per_position"] == [12 / 30, 6 / 30]
    assert s["outputs_equal_no_spec"] is True
    # the policy's choice: 60 drafted tokens in 30 drafting steps; 300 tokens - 18 accepted = 282 request-steps
    assert s["draft_tokens_per_drafting_step"] == 2.0
    assert s["drafting_share"] == 30 / 282


def test_summarize_flags_different_outputs():
    s = summarize("x", [phase(10, 1.0, [[1, 3]])], [phase(10, 1.0, [[1, 2]])], 1)
    assert s["outputs_equal_no_spec"] is False
    assert s["mean_acceptance_length"] is None


def test_markdown_tables():
    report = {"vllm": "0.32.0", "machine": {"cpus": 2, "processor": "x86_64"}, "command": "python -m bench.run",
              "wall_seconds": 120.0,
              "settings": {"max_tokens": 128, "repeats": 3, "k_medusa": 4, "k_eagle": 3},
              "rows": [summarize("no speculation", [phase(10, 1.0, [[1]])], [phase(10, 1.0, [[1]])], 1)
                       | {"concurrency": 1, "group": 1}],
              "paired": [{"pair": "our Medusa / vLLM built-in Medusa", "concurrency": 1, "ratio": 1.01,
                          "ratios": [1.0, 1.01, 1.02]}]}
    md = markdown(report)
    assert "| no speculation | 1 | 10.0 | 1.00x | – | – | – | yes |" in md
    assert "| our Medusa / vLLM built-in Medusa | 1 | 1.010 | 1.000, 1.010, 1.020 |" in md
    spec = summarize("our EAGLE-3", [phase(100, 1.0, [[1]], {"drafts": 10, "draft_tokens": 25, "accepted": 20})],
                     [phase(100, 1.0, [[1]])], 1) | {"concurrency": 1, "group": 1}
    report["settings"] |= {"k_eagle3": 3, "prompt_set": "chat"}
    md = markdown(report | {"rows": [spec]})
    assert "| 2.50 in 12 % of steps | yes |" in md and "EAGLE-3 K=3" in md and "MT-Bench questions" in md
    assert "in flight" not in md
    report["settings"] |= {"stream": True, "prompts_cn": 3}
    assert "At concurrency c > 1, c requests in flight (a closed loop over 3 x c prompts per phase)" in markdown(report)
    assert "Prefix cache" not in markdown(report)  # a report from before --prefix-cache
    assert "Prefix cache emptied before every timed phase." in markdown(report | {"settings": report["settings"]
                                                                                   | {"prefix_cache": "fresh"}})
    assert "Prefix cache kept across phases" in markdown(report | {"settings": report["settings"]
                                                                   | {"prefix_cache": "warm"}})
    o = overhead_markdown({"command": "c", "vllm": "0.32.0", "steps": 5, "concurrency": 1,
                           "rows": [{"row": "our EAGLE", "propose_ms": 3.0, "model_ms": 2.0, "other_ms": 1.0}],
                           "pairs": [{"pair": "p", "propose_ratio": 1.0, "other_ratio": 1.1}],
                           "startup": {"plugins": 2, "register_ms": 5.0, "import_ms": 1.0}})
    assert "| our EAGLE | 3.00 | 2.00 | 1.00 |" in o and "| p | 1.000 | 1.100 |" in o and "5.0 ms" in o


def test_write_saves_json_and_markdown(tmp_path):
    import json

    from bench.report import write

    md = write(tmp_path / "out", "results", {"a": 1}, lambda r: f"a={r['a']}\n")
    assert md == "a=1\n"
    assert json.loads((tmp_path / "out" / "results.json").read_text()) == {"a": 1}
    assert (tmp_path / "out" / "results.md").read_text() == "a=1\n"


def test_every_bench_command_parses_what_run_group_reads():
    """bench.policy shares bench.run's run_group: each command's arguments must carry every
    attribute run_group reads (a missing one broke make bench-policy once)."""
    import inspect
    import re

    import bench.policy
    import bench.run

    used = set(re.findall(r"args\.(\w+)", inspect.getsource(bench.run.run_group)))
    assert used
    for args in (bench.policy.parser().parse_args([]), bench.policy.parser().parse_args(["--quick"])):
        missing = [a for a in sorted(used) if not hasattr(args, a)]
        assert not missing, f"bench.policy lacks {missing}"


def test_answer_lengths_fixed_or_varied_per_prompt():
    """``--lengths varied``: a length per prompt from 0.5 to 1.5 x --max-tokens, the same for a prompt whatever the
    phase's size, spread so that a closed loop's first c requests end at c different steps."""

    from bench.run import answer_lengths

    assert answer_lengths(24, 96) == 96 == answer_lengths(24, 96, "fixed")
    v = answer_lengths(24, 96, "varied")
    assert len(v) == 24 and all(48 <= n <= 144 for n in v)
    assert abs(sum(v) / len(v) - 96) < 0.05 * 96
    assert answer_lengths(8, 96, "varied") == v[:8] and len(set(v[:8])) == 8
    assert min(v) < 60 and max(v) > 132  # spread over the whole range, not bunched
    with pytest.raises(ValueError, match="'random'"):
        answer_lengths(4, 96, "random")


def test_the_header_says_how_long_answers_may_be():
    from bench.report import lengths_note

    assert lengths_note({"max_tokens": 96}) == "96 new tokens per request"
    assert lengths_note({"max_tokens": 96, "lengths": "fixed"}) == "96 new tokens per request"
    assert lengths_note({"max_tokens": 96, "lengths": "varied"}).startswith("at most 48-144 new tokens per request")


def test_lengths_option_in_both_benchmarks():
    import bench.policy
    import bench.run

    for parse in (bench.policy.parser().parse_args, bench.run.parser().parse_args):
        assert parse([]).lengths == "fixed" and parse(["--lengths", "varied"]).lengths == "varied"


class _FakeEngine:
    """bench.run.Engine without a process: answers each run with the instance that ran it."""

    made: list = []

    def __init__(self, name, model, spec, env, log_dir, max_num_seqs, max_model_len=2048, wait=True, log_mode="w"):
        self.name, self.log_mode, self.closed, self.start_seconds = name, log_mode, False, 1.0
        _FakeEngine.made.append(self)

    def wait_ready(self):
        pass

    def run(self, prompts, concurrency, max_tokens, stream=False, fresh_prefix_cache=False):
        assert not self.closed
        return {"tokens": 1, "seconds": 1.0, "outputs": [], "engine": self}

    def close(self):
        self.closed = True


def test_restart_gives_each_repetition_engines_of_its_own(monkeypatch, tmp_path):
    """``--restart``: every repetition after the first runs on newly started engines (their log appended to);
    without it, one engine per row serves every repetition."""
    import bench.run

    monkeypatch.setattr(bench.run, "Engine", _FakeEngine)
    rows = {"no speculation": {"spec": None, "env": {}}, "our EAGLE-3": {"spec": {}, "env": {}}}
    for restart, instances in ((False, 1), (True, 3)):
        _FakeEngine.made = []
        args = bench.run.parser().parse_args(["--repeats", "3", "--concurrency", "8", "--stream"]
                                             + (["--restart"] if restart else []))
        g = bench.run.run_group(list(rows), rows, tmp_path, [[1]] * 8, args, tmp_path)
        for name in rows:
            used = [p["engine"] for p in g["phases"][(name, 8)]]
            assert len(used) == 3 and len(set(map(id, used))) == instances
        assert len(_FakeEngine.made) == 2 * instances and all(e.closed for e in _FakeEngine.made)
        assert [e.log_mode for e in _FakeEngine.made] == ["w", "w"] + ["a", "a"] * (instances - 1)


def test_a_draft_row_of_ones_own_needs_a_name_and_a_draft_folder(tmp_path, capsys, monkeypatch):
    """``--eagle3-draft`` / ``--medusa-draft`` / ``--eagle-draft NAME=DIR`` are refused before any engine or model is
    touched unless DIR holds a config.json and NAME is given; a good one gets past the check."""
    import bench.run
    import bench.smollm2

    def reached():
        raise RuntimeError("past the check")

    monkeypatch.setattr(bench.smollm2, "ensure_smollm2", reached)  # what main does first after the check
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{}")
    for bad in (["--medusa-draft", f"x={tmp_path / 'nope'}"], ["--eagle3-draft", f"={draft}"],
                ["--medusa-draft", str(draft)], ["--eagle-draft", f"x={tmp_path / 'nope'}"]):
        with pytest.raises(SystemExit) as e:
            bench.run.main(bad)
        assert e.value.code == 2
        assert f"{bad[0]} {bad[1]}: expected NAME=DIR" in capsys.readouterr().err
    for option in ("--medusa-draft", "--eagle3-draft", "--eagle-draft"):
        with pytest.raises(RuntimeError, match="past the check"):
            bench.run.main([option, f"mine={draft}"])


def test_eagle_copies_for_vllms_builtin_and_the_full_vocabulary_row(tmp_path):
    """vLLM's built-in EAGLE-1 has no draft vocabulary (and drops fc.bias): its rows, and the parity test, load a copy
    of the shipped draft without d2t/t2d (and fc.bias); the row ``our EAGLE, full vocabulary`` a copy without the
    vocabulary alone. The shipped draft holds all of them (bench/README.md)."""
    import torch
    from safetensors.torch import load_file

    from bench.run import DRAFT_VOCAB, DRAFTS, materialize_eagle, materialize_eagle_nobias

    src = DRAFTS / "smollm2-eagle"
    keys = set(load_file(str(src / "model.safetensors")))
    assert {"fc.bias", *DRAFT_VOCAB} <= keys
    nobias = materialize_eagle_nobias(src, tmp_path / "nobias")
    assert set(load_file(str(nobias / "model.safetensors"))) == keys - {"fc.bias", "d2t", "t2d"}
    full = materialize_eagle(src, tmp_path / "full", DRAFT_VOCAB)
    got = load_file(str(full / "model.safetensors"))
    assert set(got) == keys - {"d2t", "t2d"}
    assert torch.equal(got["fc.weight"], load_file(str(src / "model.safetensors"))["fc.weight"])
    assert (full / "config.json").read_text() == (src / "config.json").read_text()


def test_medusa_copies_for_vllms_builtin_and_the_full_vocabulary_row(tmp_path):
    """The shipped Medusa heads hold a draft vocabulary (token_map, truncated_vocab_size) and share the target's
    lm_head. vLLM's built-in Medusa loads a copy with the target's lm_head stored and no vocabulary (biases dropped
    for the row that drops them); the row ``our Medusa, full vocabulary`` a copy without the vocabulary alone."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from bench.run import DRAFTS, materialize_builtin_medusa, materialize_medusa

    src = DRAFTS / "smollm2-medusa"
    heads = load_file(str(src / "medusa_lm_head.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    assert "token_map" in heads and cfg["truncated_vocab_size"] == heads["token_map"].numel() < cfg["vocab_size"]
    target = tmp_path / "target"
    target.mkdir()
    embed = torch.randn(cfg["vocab_size"], 2)
    save_file({"model.embed_tokens.weight": embed}, str(target / "model.safetensors"))
    full = materialize_medusa(src, tmp_path / "full")
    assert set(load_file(str(full / "medusa_lm_head.safetensors"))) == set(heads) - {"token_map"}
    assert json.loads((full / "config.json").read_text()) == {k: v for k, v in cfg.items()
                                                              if k != "truncated_vocab_size"}
    builtin = load_file(str(materialize_builtin_medusa(src, target, tmp_path / "b", drop_bias=True)
                            / "medusa_lm_head.safetensors"))
    assert set(builtin) == {k for k in heads if k.endswith(".weight")} | {"lm_head.weight"}
    assert torch.equal(builtin["lm_head.weight"], embed.to(builtin["lm_head.weight"].dtype))
