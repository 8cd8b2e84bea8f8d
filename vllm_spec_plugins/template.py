"""``vllm-spec-plugins new NAME``: write a plugin distribution that works out of the box.

The template is a small Medusa-style heads drafter: ``num_heads`` residual blocks over the
target's final hidden state, decoded with the target's own ``compute_logits`` (shared in
``bind_target``), a checkpoint writer for any target, a unit test on the in-process harness
and the conformance suite. It installs, shows in ``vllm-spec-plugins list``, passes
``vllm-spec-plugins check`` and its own tests; replace the model with yours.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

_FILES: dict[str, str] = {}

_FILES["pyproject.toml"] = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{camel} drafter for vLLM speculative decoding (a vllm-spec-plugins plugin)"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["vllm-spec-plugins>=0.1,<0.2"]

[project.entry-points.vllm_spec_plugins]
{name} = "{pkg}"          # plugin name = entry-point name ("method": "{name}", VLLM_SPEC_PLUGINS={name})

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
markers = ["e2e: starts real vLLM engines (slow)"]
'''

_FILES["README.md"] = '''\
# {dist}

A drafter plugin for vllm-spec-plugins (its docs: `docs/writing-plugins.md` in the vllm-spec-plugins
repository), written by `vllm-spec-plugins new {name}`.

```bash
pip install -e .
vllm-spec-plugins list                                  # shows plugin '{name}'
python -c "from {pkg}.checkpoint import make_checkpoint; make_checkpoint('draft', 'TARGET')"
vllm-spec-plugins check draft --target TARGET            # no engine needed
pytest                                                  # harness unit test + conformance suite (real engines)
vllm serve TARGET --speculative-config '{{"model": "draft", "num_speculative_tokens": 3}}'
```

Files: `src/{pkg}/__init__.py` registers the drafter (no torch or vLLM imports there),
`config.py` is its config class, `model.py` the draft model, `checkpoint.py` writes a
checkpoint for a target, `tests/` tests it.
'''

_FILES["src/{pkg}/__init__.py"] = '''\
"""{camel}: a drafter plugin for vllm-spec-plugins (registration only: no torch or vLLM imports here)."""

from vllm_spec_plugins import Drafter, hookimpl

__version__ = "0.1.0"
VLLM_SPEC_API = 4


@hookimpl
def vllm_spec_register_drafters(register):
    register(Drafter(
        architectures=("{camel}Drafter",),
        model_type="{model_type}",
        config_class="{pkg}.config:{camel}Config",
        model_class="{pkg}.model:{camel}Drafter",
        kind="heads",
        max_speculative_tokens="num_heads",
    ))
'''

_FILES["src/{pkg}/config.py"] = '''\
"""The draft config class (imported in every vLLM process: no side effects, no torch or vLLM)."""

from transformers import PretrainedConfig


class {camel}Config(PretrainedConfig):
    model_type = "{model_type}"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=3, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["{camel}Drafter"])
        super().__init__(**kwargs)
'''

_FILES["src/{pkg}/model.py"] = '''\
"""The draft model (built in vLLM's worker processes).

Head ``i`` proposes the token ``i + 1`` places after the next token: a residual block
``x = h + SiLU(W_i h)`` over the target's final hidden state ``h`` at the last accepted
token, decoded with the target's own ``compute_logits`` (shared in ``bind_target``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn as nn


class {camel}Drafter(nn.Module):
    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        spec = vllm_config.speculative_config
        config = spec.draft_model_config.hf_config
        self.checkpoint = spec.draft_model_config.model
        self.num_heads = min(config.num_heads, spec.num_speculative_tokens or config.num_heads)
        self.blocks = nn.ModuleList(
            [nn.Linear(config.hidden_size, config.hidden_size, bias=False) for _ in range(self.num_heads)])
        self.act = nn.SiLU()
        self.compute_logits = None

    def bind_target(self, target_model: nn.Module) -> None:
        """Called once after loading, before any forward: keep what is needed from the target."""
        self.compute_logits = target_model.compute_logits

    def forward(self, hidden_states: torch.Tensor, num_drafts: int | None = None) -> torch.Tensor:
        """``hidden_states [num_reqs, hidden]`` -> draft token ids ``[num_reqs, num_drafts]``.

        ``num_drafts`` (API 3): the draft tokens this step uses (the drafting policy may ask for fewer
        than ``num_heads``); the heads after it are not run."""
        blocks = self.blocks[:num_drafts] if num_drafts else self.blocks
        drafts = [self.compute_logits(hidden_states + self.act(block(hidden_states))).argmax(dim=-1)
                  for block in blocks]
        return torch.stack(drafts, dim=1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if name.startswith("blocks.") and int(name.split(".")[1]) >= self.num_heads:
                continue  # heads beyond num_speculative_tokens are not built
            if name not in params:
                raise ValueError(f"{dist}: checkpoint '{{self.checkpoint}}' has key {{name!r}}; expected "
                                 f"blocks.<i>.weight")
            if tuple(params[name].shape) != tuple(w.shape):
                raise ValueError(f"{dist}: checkpoint '{{self.checkpoint}}' key {{name!r}} has shape "
                                 f"{{list(w.shape)}}, expected {{list(params[name].shape)}}")
            with torch.no_grad():
                params[name].copy_(w.to(params[name].dtype))
            loaded.add(name)
        return loaded
'''

_FILES["src/{pkg}/checkpoint.py"] = '''\
"""Write a {camel} checkpoint for a target (random small heads; head 0 is the identity).

Replace with your training code's export. The config.json sets hidden_size and vocab_size.
"""

from __future__ import annotations

import json
from pathlib import Path


def make_checkpoint(path, target, *, num_heads: int = 3, seed: int = 0, noise: float = 0.02) -> Path:
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((Path(target) / "config.json").read_text())
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    g = torch.Generator().manual_seed(seed)
    sd = {{f"blocks.{{i}}.weight": (torch.zeros(hidden, hidden) if i == 0 else
                                   torch.randn(hidden, hidden, generator=g) * noise) for i in range(num_heads)}}
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({{
        "model_type": "{model_type}", "architectures": ["{camel}Drafter"],
        "hidden_size": hidden, "vocab_size": vocab, "num_heads": num_heads}}, indent=2))
    save_file({{k: v.contiguous() for k, v in sd.items()}}, str(path / "model.safetensors"))
    return path
'''

_FILES["tests/test_{name}.py"] = '''\
"""Tests of the {camel} drafter: in process without an engine, then the conformance suite on real engines.

Install the plugin first (`pip install -e .`): vLLM's engine processes find it by its entry point.
"""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from {pkg}.checkpoint import make_checkpoint
from vllm_spec_plugins.testing.conformance import ConformanceSuite
from vllm_spec_plugins.testing.fixtures import make_tiny_target, target_lm_head


def reference_drafts(hidden: torch.Tensor, draft, target) -> torch.Tensor:
    """The drafter in plain torch: what the plugin must propose for these target hidden states."""
    sd = load_file(str(draft / "model.safetensors"))
    lm_head = target_lm_head(target)
    heads = sorted((k for k in sd if k.startswith("blocks.")), key=lambda k: int(k.split(".")[1]))
    hidden = hidden.float()
    return torch.stack([((hidden + torch.nn.functional.silu(hidden @ sd[k].T)) @ lm_head.T).argmax(-1)
                        for k in heads], dim=1)


def test_drafts_in_process(tmp_path):
    from vllm_spec_plugins.testing.harness import DrafterHarness

    target = make_tiny_target(tmp_path / "target")
    draft = make_checkpoint(tmp_path / "draft", target)
    h = DrafterHarness(target, draft, num_speculative_tokens=3)
    hidden = torch.randn(3, 128, generator=torch.Generator().manual_seed(0)) * 3
    out = h.step(["a", "b", "c"], hidden_states=hidden)
    assert torch.equal(out.drafts, reference_drafts(hidden, draft, target))


class TestConformance(ConformanceSuite):
    num_speculative_tokens = 3

    def make_draft(self, path, target):
        return make_checkpoint(path, target)

    def reference(self, record, draft, target):
        return reference_drafts(record["inputs"]["hidden_states"], draft, target)


class TestConformanceMRV2(TestConformance):
    """The same suite on vLLM's Model Runner V2, its default runner (on a CPU build through the test
    kit's Triton stand-in; docs: testing-plugins.md)."""

    runner = "v2"
'''


def names(name: str) -> dict[str, str]:
    """The names the template derives from a plugin name (``my_draft`` -> ``vllm-spec-my-draft``...)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or "") or keyword.iskeyword(name):
        raise ValueError(f"plugin name {name!r}: use lowercase letters, digits and '_', starting with a letter")
    camel = "".join(part.capitalize() for part in name.split("_") if part)
    return {"name": name, "pkg": f"vllm_spec_{name}", "dist": f"vllm-spec-{name.replace('_', '-')}",
            "camel": camel, "model_type": f"{name}_drafter"}


def write_plugin(name: str, parent: str | Path = ".") -> Path:
    """Write the distribution ``vllm-spec-<name>/`` under ``parent``; return its folder."""
    n = names(name)
    root = Path(parent) / n["dist"]
    if root.exists():
        raise FileExistsError(f"{root} already exists; pick another name or folder")
    for rel, text in _FILES.items():
        path = root / rel.format(**n)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**n))
    return root
