"""bench.policy's rows, groups and goal table (no engine): every drafter the issue's goals name, EAGLE-3 included."""

import re
import shlex
from pathlib import Path

import pytest

from bench import policy as B


@pytest.fixture
def rows(tmp_path: Path) -> dict:
    return B.rows_for(2, 2, tmp_path, 3)


def test_each_drafter_has_fixed_adaptive_and_pinned_rows(rows, tmp_path):
    for kind, k in (("EAGLE", 2), ("EAGLE-3", 3), ("Medusa", 2)):
        fixed, adaptive, pinned = (rows[f"our {kind}, {x}"] for x in (f"fixed K={k}", "adaptive policy", "pinned k=0"))
        assert fixed["env"] == {"VLLM_SPEC_PLUGINS_POLICY": "off"} and fixed["spec"]["num_speculative_tokens"] == k
        assert adaptive["env"] == {"VLLM_SPEC_PLUGINS_POLICY_STATS": str(tmp_path / f"{kind.lower()}.json")}
        assert pinned["env"] == {"VLLM_SPEC_PLUGINS_POLICY": "0"}
        assert fixed["spec"] == adaptive["spec"] == pinned["spec"]
    assert rows["our EAGLE-3, adaptive policy"]["spec"]["model"].endswith("smollm2-eagle3")
    assert rows["our EAGLE, adaptive policy"]["spec"]["model"].endswith("smollm2-eagle")


def test_groups_hold_every_row_once_at_most_four_engines(rows):
    groups = B.groups_for(rows)
    assert all(g[0] == "no speculation" and len(g) <= 4 for g in groups)
    served = [n for g in groups for n in g[1:]]
    assert sorted(served) == sorted(n for n in rows if n != "no speculation" and "first pass" not in n)
    assert groups[3] == ["no speculation", "our EAGLE-3, fixed K=3", "our EAGLE-3, adaptive policy",
                         "our EAGLE-3, pinned k=0"]


def test_only_selects_the_drafter_not_a_prefix_of_its_name(rows):
    """``--only EAGLE`` must not bring in the EAGLE-3 group ("EAGLE" is in "EAGLE-3"), nor ``--only EAGLE-3`` the
    EAGLE-1 groups."""
    eagle = B.groups_for(rows, only="EAGLE")
    assert [B.kind_of(n) for g in eagle for n in g].count("EAGLE-3") == 0
    assert any("our EAGLE, adaptive policy" in g for g in eagle)
    assert B.groups_for(rows, only="EAGLE-3") == [B.groups_for(rows)[3]]
    assert B.groups_for(rows, only="EAGLE-3", skip=["pinned"]) == [
        ["no speculation", "our EAGLE-3, fixed K=3", "our EAGLE-3, adaptive policy"]]
    assert B.groups_for(rows, floor=True, only="Medusa") == [B.FLOOR_ROWS]
    # skip first: the static group's Medusa row skipped, it has no Medusa row left (only EAGLE's floor) and goes
    assert B.groups_for(rows, only="Medusa", skip=["static"]) == [
        ["no speculation", "our Medusa, fixed K=2", "our Medusa, adaptive policy", "our Medusa, pinned k=0"]]


def test_a_group_left_with_no_speculation_alone_is_dropped(rows):
    groups = B.groups_for(rows, skip=["our EAGLE-3", "n-gram", "EAGLE, fixed", "EAGLE, adaptive"])
    assert all(len(g) > 1 for g in groups) and len(groups) == 2  # Medusa's, and the static schedules'


def test_kind_of():
    assert B.kind_of("our EAGLE-3, fixed K=3") == "EAGLE-3"
    assert B.kind_of("our EAGLE, pinned k=0, first pass every step") == "EAGLE"
    assert B.kind_of("vLLM n-gram") is None and B.kind_of("no speculation") is None


def row(name, c, speedup):
    return {"row": name, "concurrency": c, "speedup": speedup}


def test_targets_per_drafter_against_its_own_fixed_k():
    rs = [row("our EAGLE, fixed K=2", 8, 0.80), row("our EAGLE, adaptive policy", 8, 0.96),
          row("our EAGLE-3, fixed K=3", 8, 1.10), row("our EAGLE-3, adaptive policy", 8, 1.045),
          row("our EAGLE-3, fixed K=3", 1, 1.20), row("our EAGLE-3, adaptive policy", 1, 1.25)]
    t = {(x["drafter"], x["concurrency"]): x for x in B.targets(rs)}
    assert set(t) == {("EAGLE", 8), ("EAGLE-3", 8), ("EAGLE-3", 1)}
    assert t[("EAGLE", 8)]["adaptive_vs_better_of_no_spec_and_fixed"] == pytest.approx(0.96)  # no spec is better
    assert t[("EAGLE-3", 8)]["adaptive_vs_better_of_no_spec_and_fixed"] == pytest.approx(0.95)  # EAGLE-3's fixed K
    assert t[("EAGLE-3", 1)]["fixed_vs_no_spec"] == 1.20


def test_the_table_names_the_prompt_set():
    report = {"vllm": "0.32", "command": "python -m bench.policy --prompt-set chat", "wall_seconds": 60,
              "settings": {"max_tokens": 96, "repeats": 3, "k_medusa": 2, "k_eagle": 2, "k_eagle3": 3,
                           "prompt_set": "chat", "cpu_runtime": {}, "prefix_cache": "fresh"},
              "rows": [], "targets": [], "policy_stats": {}}
    md = B.markdown(report)
    assert "MT-Bench questions" in md and "EAGLE-3 K=3" in md
    report["settings"]["prompt_set"] = "sharegpt"
    assert "first turns of held-out ShareGPT conversations" in B.markdown(report)


def test_the_prompt_set_and_drafter_options():
    """``--prompt-set`` is parsed and passed on (bench.run's option, shared)."""
    assert B.parser().parse_args(["--prompt-set", "chat"]).prompt_set == "chat"
    assert B.parser().parse_args([]).prompt_set == "heldout"
    with pytest.raises(SystemExit):
        B.parser().parse_args(["--only", "EAGLE-2"])


DOCS = ("README.md", "docs/benchmarks.md", "docs/adaptive-policy.md", "bench/README.md")


def module_commands(text: str, module: str = "bench.policy") -> list[str]:
    """Every ``python -m <module>`` command in a markdown text: the lines of its code blocks that start with one
    (up to a ``#`` comment), and its inline code spans holding one (wrapped lines joined)."""
    out = []
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    for block in fenced:
        out += [line.split("  #")[0].strip() for line in block.splitlines()
                if line.split()[:3] == ["python", "-m", module]]
    inline = re.sub(r"```.*?```", "", text, flags=re.S)
    out += [" ".join(m.split()) for m in re.findall(rf"`([^`]*python -m {re.escape(module)}(?![\w.])[^`]*)`", inline)]
    return out


def test_every_bench_policy_command_in_the_docs_parses():
    """The commands the docs give for bench.policy run as written: each parses with its parser (an option renamed or
    removed, or a drafter ``--only`` does not know, fails here)."""
    root = Path(__file__).resolve().parents[2]
    seen = 0
    for name in DOCS:
        for cmd in module_commands((root / name).read_text()):
            words = shlex.split(cmd)
            words = words[words.index("bench.policy") + 1:]
            try:
                B.parser().parse_args(words)
            except SystemExit:
                pytest.fail(f"{name}: `{cmd}` does not parse")
            seen += 1
    assert seen >= 10


TRAINING = ("bench.run", "bench.hidden", "bench.train_eagle", "bench.train_eagle3", "bench.train_medusa")


def parses(module: str, cmd: str) -> bool:
    import importlib

    words = shlex.split(cmd)
    try:
        importlib.import_module(module).parser().parse_args(words[words.index(module) + 1:])
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize("module", TRAINING)
def test_every_bench_run_and_training_command_in_the_docs_parses(module, capsys):
    """The docs' commands for bench.run and the training stages parse with their module's parser (an option renamed
    or removed fails here). A command holding a ``<placeholder>`` for the reader to fill in is skipped."""
    root = Path(__file__).resolve().parents[2]
    seen = 0
    for name in DOCS:
        for cmd in module_commands((root / name).read_text(), module):
            if re.search(r"<[^>]+>", cmd):
                continue
            assert parses(module, cmd), f"{name}: `{cmd}` does not parse: {capsys.readouterr().err.strip().splitlines()[-1:]}"
            seen += 1
    assert seen >= 1


def test_a_training_command_with_an_unknown_option_does_not_parse():
    assert parses("bench.hidden", "python -m bench.hidden --bf16 --resume --aux-layers 2,15,27")
    assert not parses("bench.hidden", "python -m bench.hidden --bf16 --continue")
    assert not parses("bench.train_eagle3", "python -m bench.train_eagle3 --draft-vocab 12288")
    assert parses("bench.train_eagle", "python -m bench.train_eagle --evaluate D --heldout-dir .cache/bench/chat")
    assert not parses("bench.train_eagle", "python -m bench.train_eagle --bf16")
    # --also-evaluate takes NAME=DIR: a bare folder (no name to file its figures under) is refused at parse time
    assert parses("bench.train_eagle", "python -m bench.train_eagle --also-evaluate sharegpt=.cache/bench/sgheld")
    for bad in ("sharegpt", "=.cache/bench/sgheld", "sharegpt="):
        assert not parses("bench.train_eagle", f"python -m bench.train_eagle --also-evaluate {bad}")
        assert not parses("bench.train_eagle3", f"python -m bench.train_eagle3 --also-evaluate {bad}")
    assert not parses("bench.run", "python -m bench.run --concurrency eight")


def test_a_command_that_does_not_parse_is_caught():
    bad = "Run `python -m bench.policy --only EAGLE-4 --stream`.\n```bash\npython -m bench.policy --quick  # fine\n```\n"
    cmds = module_commands(bad)
    assert cmds == ["python -m bench.policy --quick", "python -m bench.policy --only EAGLE-4 --stream"]
    with pytest.raises(SystemExit):
        B.parser().parse_args(shlex.split(cmds[1])[3:])


@pytest.mark.parametrize("module", ["bench.train_eagle", "bench.train_eagle3", "bench.train_medusa"])
def test_a_trainer_writes_the_shipped_drafts_only_when_told(module):
    """A trainer run with its defaults saves a candidate under .cache/bench; the drafts in bench/drafts change only
    where ``--out`` names them, as the Makefile's recipes do."""
    import importlib

    root = Path(__file__).resolve().parents[2]
    out = importlib.import_module(module).parser().parse_args([]).out.resolve()
    assert out.is_relative_to(root / ".cache" / "bench") and not out.is_relative_to(root / "bench" / "drafts"), out


def test_the_makefile_names_every_shipped_draft_it_writes():
    """Every trainer in the Makefile's recipes says where it saves (the defaults are candidates under .cache), and
    ``make drafts`` writes the three shipped folders, each through a recipe's ``--out``."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "Makefile").read_text().replace("\\\n", " ")
    trainers = [line for line in text.splitlines() if re.search(r"-m bench\.train_\w+", line)
                and "--evaluate" not in line and "--add-draft-vocab" not in line]
    assert len(trainers) >= 5 and all("--out " in line for line in trainers), [t for t in trainers if "--out " not in t]
    drafts = re.findall(r"^drafts: (DRAFTS_SG_\w*OUT) = (\S+)$", text, flags=re.M)
    assert sorted(d for _, d in drafts) == [f"bench/drafts/smollm2-{n}" for n in ("eagle", "eagle3", "medusa")], drafts
    assert all(f"--out $({var})" in text for var, _ in drafts)
