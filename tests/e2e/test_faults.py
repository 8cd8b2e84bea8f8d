"""A plugin can never break vLLM, and a failing drafter never loses a request (real CPU engines).

The faulty test plugin (tests/plugins/faulty_drafter) fails on purpose from its N-th call: its
forward raises, returns ids outside the vocabulary, or its state-carry hook raises. Every
request must complete with the output it has without speculation, speculation must stop
(the spec-decode counters stop growing), and one ERROR line must name plugin, distribution,
version, model class and the original traceback. A draft that cannot run is refused at
start-up, even with ``enforce_eager`` on the CPU build (no warm-up there).

Its configs leave ``hidden_size`` and ``vocab_size`` out: the shim fills them from the target.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import MAX_TOKENS, PROMPTS, with_pythonpath
from vllm_spec_plugins.testing.engine import run_engine

DIST = "vsp-test-faulty-drafter 0.0.7"
FAULT_AT = 3  # forward calls; call 1 is the shim's trial forward at load, so two steps draft first


def faulty_checkpoint(path: Path, *, fault: str, arch: str = "FaultyDrafter", fault_at: int = FAULT_AT,
                      hidden: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "vsp_faulty", "architectures": [arch], "num_heads": 3, "fault": fault,
           "fault_at": fault_at}
    if hidden is not None:
        cfg["hidden_size"] = hidden
    (path / "config.json").write_text(json.dumps(cfg))
    h = hidden or 128
    save_file({"proj.weight": torch.zeros(h, h)}, str(path / "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def env(faulty_plugin_path):
    return with_pythonpath(faulty_plugin_path)


def _run(tiny, env, draft, **kw):
    spec = {"model": str(draft), "num_speculative_tokens": 3}
    return run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS, env=env, **kw)


def _error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "Speculative decoding is now OFF" in ln]


def _degraded(r, baseline, model_class: str, what: str) -> None:
    """Output as without speculation; one ERROR naming everything; drafts stopped after the fault."""
    assert r.outputs == baseline.outputs
    errors = _error_lines(r.log)
    assert len(errors) == 1, errors
    line = errors[0]
    assert "ERROR" in line and f"plugin 'faulty' ({DIST})" in line and f"model class {model_class}" in line
    assert what in r.log
    assert "Original error:" in r.log or "vocabulary" in line
    # The first steps drafted (at most one row per prompt per step), then nothing more was scheduled.
    assert 0 < r.metrics["drafts"] <= (FAULT_AT - 1) * len(PROMPTS)
    assert 0 < r.metrics["draft_tokens"] <= 3 * r.metrics["drafts"]  # k <= 3 (the drafting policy may lower it)


def test_forward_raising_degrades_to_no_speculation(tiny, env, baseline, tmp_path):
    r = _run(tiny, env, faulty_checkpoint(tmp_path / "raise", fault="raise"))
    _degraded(r, baseline, "vsp_faulty_drafter.model:FaultyDrafter",
              f"RuntimeError: faulty drafter: planned failure at forward call {FAULT_AT}")
    assert "Traceback (most recent call last)" in r.log and "vsp_faulty_drafter/model.py" in r.log
    # hidden_size and vocab_size were left out of config.json: filled from the target (128, 259)
    assert "served by plugin 'faulty'" in r.log


def test_out_of_vocabulary_drafts_degrade(tiny, env, baseline, tmp_path):
    r = _run(tiny, env, faulty_checkpoint(tmp_path / "oov", fault="oov"))
    _degraded(r, baseline, "vsp_faulty_drafter.model:FaultyDrafter",
              "proposed draft token ids outside the target's vocabulary [0, 259)")
    assert "IndexError" not in r.log


def test_state_carry_hook_raising_degrades(tiny, env, baseline, tmp_path):
    r = _run(tiny, env, faulty_checkpoint(tmp_path / "state", fault="state", arch="FaultyStateDrafter"))
    _degraded(r, baseline, "vsp_faulty_drafter.model:FaultyStateDrafter",
              "the state-carry hook vsp_faulty_drafter.model:FaultyStateDrafter.update_state() raised ValueError")


def test_strict_mode_reraises(tiny, env, tmp_path):
    r = _run(tiny, {**env, "VLLM_SPEC_PLUGINS_STRICT": "1"}, faulty_checkpoint(tmp_path / "strict", fault="raise"),
             check=False)
    assert r.returncode != 0
    assert "planned failure at forward call" in r.log
    assert not _error_lines(r.log)


def test_plugin_claiming_a_vllm_architecture_changes_nothing(tiny, env, baseline, tmp_path):
    """The faulty plugin claims LlamaForCausalLM. A plain Llama draft (a copy of the target) stays vLLM's
    draft_model, even with the shim's vsp_* stamps in its config.json (a saved plugin config)."""
    draft = tmp_path / "plain-llama-draft"
    shutil.copytree(tiny["target"], draft)
    cfg = json.loads((draft / "config.json").read_text())
    cfg.update(vsp_plugin="faulty", vsp_dist=DIST, vsp_architecture="LlamaForCausalLM")
    (draft / "config.json").write_text(json.dumps(cfg))
    r = _run(tiny, env, draft)
    assert r.outputs == baseline.outputs
    assert r.metrics["accepted"] == r.metrics["draft_tokens"] > 0  # the target drafting for itself
    assert "served by plugin" not in r.log
    assert "ignored ['vsp_plugin', 'vsp_dist', 'vsp_architecture']" in r.log
    assert "is a model vLLM already serves: not registered over it" in r.log  # the warning, in the engine log
    assert baseline.outputs and len(baseline.outputs[0]) == MAX_TOKENS  # the target started with the plugin


def test_stamped_eagle_draft_with_plain_spec_model(tiny, baseline, tmp_path):
    """An EAGLE-1 checkpoint with a plain Llama config and a folder name without 'eagle-': the config
    stamp {"vllm_spec_plugin": "eagle"} selects the plugin, no "method" needed."""
    draft = tmp_path / "smolish-draft"
    shutil.copytree(tiny["eagle"], draft)
    cfg = json.loads((draft / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and "vllm_spec_plugin" not in cfg
    cfg["vllm_spec_plugin"] = "eagle"
    (draft / "config.json").write_text(json.dumps(cfg))
    r = _run(tiny, {}, draft)
    assert r.outputs == baseline.outputs
    assert f"vllm_spec_plugins: draft '{draft}' served by plugin 'eagle' (vllm-spec-eagle 0.1.0)" in r.log
    assert r.metrics["accepted"] > 0


def test_shipped_eagle_draft_carries_the_stamp():
    root = Path(__file__).resolve().parents[2]
    cfg = json.loads((root / "bench" / "drafts" / "smollm2-eagle" / "config.json").read_text())
    assert cfg["vllm_spec_plugin"] == "eagle"
    from vllm_spec_plugins.routing import path_method

    assert path_method(str(root / "bench" / "drafts" / "smollm2-eagle")) is None  # no folder-name rule: the stamp
    assert os.path.isfile(root / "bench" / "drafts" / "smollm2-eagle" / "model.safetensors")


# -- plugin code outside the forward, and SystemExit ---------------------------------------------------


def test_sys_exit_in_forward_degrades_to_no_speculation(tiny, env, baseline, tmp_path):
    """A plugin's SystemExit is a plugin failure like any other: it must not end the engine."""
    r = _run(tiny, env, faulty_checkpoint(tmp_path / "exit", fault="exit"))
    _degraded(r, baseline, "vsp_faulty_drafter.model:FaultyDrafter",
              f"SystemExit: faulty drafter: planned sys.exit at forward call {FAULT_AT}")


def test_trace_dir_that_is_a_file_is_refused_at_start(tiny, env, tmp_path):
    bad = tmp_path / "not-a-folder"
    bad.write_text("x")
    r = _run(tiny, {**env, "VLLM_SPEC_PLUGINS_TRACE_DIR": str(bad)}, faulty_checkpoint(tmp_path / "t", fault="none"),
             check=False)
    assert r.returncode != 0
    assert f"VLLM_SPEC_PLUGINS_TRACE_DIR='{bad}' cannot hold the drafting trace: FileExistsError" in r.log


#: The shipped EAGLE-1's KV-only path (API 4) broken: what a plugin's faulty ``kv_only`` branch looks like.
BROKEN_KV_ONLY = '''

def _break(mod):
    def write_kv(self, *args, **kwargs):
        raise RuntimeError("planned: the kv_only path is broken")
    mod.EagleDecoder.write_kv = write_kv


when_imported("vllm_spec_eagle.model", _break)
'''


def test_attention_forward_failing_when_told_kv_only_is_refused_at_start(tiny, tmp_path, monkeypatch):
    """API 4: the start-up trial also runs an attention drafter's forward told ``kv_only=True``. The shipped EAGLE
    with its KV-only path broken is refused at start, naming plugin, distribution and model class, instead of
    starting and turning speculation off at its first catch-up."""
    from tests.e2e.counting_site import counting_site

    env, _ = counting_site(tmp_path, monkeypatch, [], BROKEN_KV_ONLY)
    r = run_engine(tiny["target"], speculative_config={"model": str(tiny["eagle"]), "num_speculative_tokens": 2},
                   prompts=PROMPTS[:1], max_tokens=4, env=env, check=False)
    assert r.returncode != 0
    assert ("(plugin 'eagle', vllm-spec-eagle 0.1.0, model class vllm_spec_eagle.model:EagleDraftModel) failed its "
            "trial forward at start-up") in r.log, r.log[-3000:]
    assert "planned: the kv_only path is broken" in r.log
