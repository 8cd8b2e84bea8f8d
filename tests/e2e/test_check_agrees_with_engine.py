"""`vllm-spec-plugins check --target` refuses exactly what the engine refuses at start-up, with the same message,
and names the same plugin for what it accepts.

Each case is run both ways: `check_checkpoint(draft, target)` in process and a real engine start. The
catalogue rows behind them: docs/bad-inputs.md 19 (a draft the trial forward refuses), 28 (an unmarked EAGLE
layout), 39 (an unknown method), 57 (EAGLE-3 layer ids past the target).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.conftest import PROMPTS
from vllm_spec_plugins import diagnose
from vllm_spec_plugins.testing.engine import run_engine


@pytest.fixture(autouse=True)
def _environment_untouched(monkeypatch):
    """check_checkpoint builds vLLM configs in this process: whatever vLLM writes to os.environ is undone."""
    import os

    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _medusa_h64(tiny, tmp_path):
    draft = tmp_path / "medusa-h64"
    shutil.copytree(tiny["medusa"], draft)
    sd = load_file(str(draft / "medusa_lm_head.safetensors"))
    g = torch.Generator().manual_seed(0)
    save_file({k: torch.randn(*[64 if n == 128 else n for n in v.shape], generator=g) for k, v in sd.items()},
              str(draft / "medusa_lm_head.safetensors"))
    cfg = json.loads((draft / "config.json").read_text())
    cfg["hidden_size"] = 64
    (draft / "config.json").write_text(json.dumps(cfg))
    return draft, {}, "failed its trial forward at start-up"


def _unmarked_eagle(tiny, tmp_path):
    draft = tmp_path / "smolish-draft"  # no "eagle-" in the name, no stamp, no "method"
    shutil.copytree(tiny["eagle"], draft)
    return draft, {}, "has the EAGLE layout (fc.weight) but its config.json"


def _unknown_method(tiny, tmp_path):
    return tiny["medusa"], {"method": "medusa2"}, "names 'medusa2', which is neither an installed spec-decode plugin"


def _eagle3_bad_layers(tiny, tmp_path):
    from vllm_spec_plugins.testing.fixtures import make_tiny_eagle3

    draft = make_tiny_eagle3(tmp_path / "tiny-eagle3-bad", tiny["target"], aux_layer_ids=[0, 1, 5])
    return draft, {}, "[5] outside 0..2"


@pytest.mark.parametrize("case", [_medusa_h64, _unmarked_eagle, _unknown_method, _eagle3_bad_layers],
                         ids=["trial-refuses", "unmarked-eagle", "unknown-method", "eagle3-layers"])
def test_check_refuses_what_the_engine_refuses_with_the_same_message(tiny, tmp_path, case):
    draft, extra, what = case(tiny, tmp_path)
    rep = diagnose.check_checkpoint(str(draft), str(tiny["target"]), method=extra.get("method"))
    failed = [i for i in rep.items if i.status == "fail"]
    assert not rep.ok and failed, rep.format()
    assert any(what in i.detail for i in failed), rep.format()
    r = run_engine(tiny["target"], speculative_config={"model": str(draft), "num_speculative_tokens": 3, **extra},
                   prompts=PROMPTS[:1], max_tokens=4, check=False)
    assert r.returncode != 0 and what in r.log
    msg = next(i.detail for i in failed if what in i.detail)
    core = msg[msg.index("vllm_spec_plugins:"):] if "vllm_spec_plugins:" in msg else msg
    assert core.split(". ")[0] in r.log  # the engine says the same thing


@pytest.mark.parametrize("name,plugin", [("mlp", "mlp_speculator"), ("eagle3", "eagle")])
def test_check_names_the_plugin_the_engine_uses(tiny, name, plugin):
    rep = diagnose.check_checkpoint(str(tiny[name]), str(tiny["target"]))
    assert rep.ok, rep.format()
    assert rep.facts["served_by"]["plugin"] == plugin
    r = run_engine(tiny["target"], speculative_config={"model": str(tiny[name]), "num_speculative_tokens": 3},
                   prompts=PROMPTS[:1], max_tokens=4)
    assert f"vllm_spec_plugins: draft '{tiny[name]}' served by plugin '{plugin}'" in r.log
