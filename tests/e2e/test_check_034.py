"""`vllm-spec-plugins check DRAFT --target TARGET` on vLLM 0.34 (Model Runner V2 only: no V1 model runner, no V1
proposers), run as a user runs it, in a subprocess with the 0.34 test environment (:func:`~vllm_spec_plugins.testing
.mrv2.vllm_env`).

* good Medusa and EAGLE-1 checkpoints pass: the draft loads through vLLM's loader on 0.34's CPU runtime, and the heads
  drafter's start-up trial runs in the speculator 0.34 builds for it (``PluginHeadsSpeculator``);
* a Medusa checkpoint too narrow for the target fails the trial, with the culprit named, and a real 0.34 engine
  refuses it too (the check-agrees-with-the-engine invariant of test_check_agrees_with_engine.py, on 0.34).
"""

from __future__ import annotations

import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import PROMPTS
from vllm_spec_plugins.testing import forkserver
from vllm_spec_plugins.testing.engine import default_env, run_engine
from vllm_spec_plugins.testing.mrv2 import vllm_env

pytestmark = pytest.mark.e2e

HEADS_TRIAL = "the start-up trial an engine runs"
TRIAL = "failed its trial forward at start-up"


def _check(target, draft, *argv: str) -> tuple[dict, str]:
    args = ["check", str(draft), "--target", str(target), "--json", *argv]
    rc, log = forkserver.run_module(sys.executable, "vllm_spec_plugins.cli", args, default_env(vllm_env("0.34")), 600)
    start = log.rfind('{\n  "title"')
    assert start >= 0 and (start == 0 or log[start - 1] == "\n"), f"no JSON report from check (rc={rc}):\n{log[-4000:]}"
    report = json.loads(log[start:log.index("\n}\n", start) + 3])
    assert rc == (0 if report["ok"] else 1), log[-3000:]
    return report, log


def _items(report: dict) -> dict[str, dict]:
    return {i["check"]: i for i in report["items"]}


def _text(report: dict) -> str:
    return "\n".join(f"{i['status']} {i['check']}: {i['detail']}" for i in report["items"])


@pytest.fixture(scope="module")
def corrupt(tiny, tmp_path_factory):
    """A Medusa checkpoint with hidden_size 64 (weights to match) for a target of hidden size 128: it loads, and
    fails the heads drafter's start-up trial (docs/bad-inputs.md row 19)."""
    import torch
    from safetensors.torch import load_file, save_file

    draft = tmp_path_factory.mktemp("c034") / "medusa-h64"
    shutil.copytree(tiny["medusa"], draft)
    f = draft / "medusa_lm_head.safetensors"
    g = torch.Generator().manual_seed(0)
    save_file({k: torch.randn(*[64 if n == 128 else n for n in v.shape], generator=g)
               for k, v in load_file(str(f)).items()}, str(f))
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**cfg, "hidden_size": 64}))
    return draft


@pytest.fixture(scope="module")
def reports(tiny, corrupt):
    """The three checks, side by side (each its own process, from one fork server)."""
    jobs = {"medusa": (tiny["medusa"],), "eagle": (tiny["eagle"], "--method", "eagle"), "corrupt": (corrupt,)}
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(_check, tiny["target"], *v) for k, v in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def test_check_passes_a_good_medusa_on_034(reports):
    report, log = reports["medusa"]
    items, text = _items(report), _text(report)
    assert report["ok"], text
    assert report["served_by"]["plugin"] == "medusa", text
    assert report["served_by"]["model_runner"] == "v2", text
    assert "removed the V1 model runner" in items["model runner"]["detail"], text
    assert items["weights"]["status"] == "ok", text
    assert items["trial forward"]["status"] == "ok" and HEADS_TRIAL in items["trial forward"]["detail"], text
    assert "cpu_model_runner" not in log and "vllm.v1.spec_decode" not in log


def test_check_passes_a_good_eagle_on_034(reports):
    report, _ = reports["eagle"]
    items, text = _items(report), _text(report)
    assert report["ok"], text
    assert report["served_by"]["plugin"] == "eagle", text
    assert items["weights"]["status"] == "ok", text


def test_check_and_a_034_engine_refuse_a_draft_failing_its_trial(tiny, corrupt, reports):
    report, _ = reports["corrupt"]
    text = _text(report)
    failed = [i for i in report["items"] if i["status"] == "fail"]
    assert not report["ok"] and failed, text
    items = _items(report)
    assert items["weights"]["status"] == "ok", text  # its own weights load; the trial under this target fails
    trial = items["trial forward"]
    assert trial["status"] == "fail" and TRIAL in trial["detail"], text
    assert "plugin 'medusa'" in trial["detail"], text  # the culprit named
    assert "ModuleNotFoundError" not in text, text
    r = run_engine(tiny["target"], speculative_config={"model": str(corrupt), "num_speculative_tokens": 3},
                   prompts=PROMPTS[:1], max_tokens=4, vllm="0.34", check=False)
    assert r.returncode != 0, f"the 0.34 engine started with what `check` refused:\n{text}"
    assert TRIAL in r.log, r.log[-4000:]
