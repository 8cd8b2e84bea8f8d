"""The multimodal probe drafters (tests/plugins/mm_probe_drafter) as test_multimodal and test_mrope use them."""

from __future__ import annotations

import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tests.conftest import claim_architecture, with_pythonpath
from vllm_spec_plugins.runtime.trace import load_trace
from vllm_spec_plugins.testing.fixtures import make_tiny_eagle

#: speculative_config "method" naming the probe plugin (an EAGLE-layout draft needs its plugin named)
METHOD = "mmprobe"


def probe_checkpoints(d: Path, target: Path) -> dict[str, Path]:
    """``probe``: the heads probe (no weights of its own; sizes: the target's); ``attn_probe``: EAGLE-1's draft
    for ``target``, claimed by the attention probe."""
    probe = d / "mm-probe"
    probe.mkdir()
    (probe / "config.json").write_text(json.dumps({"model_type": "vsp_mm_probe", "architectures": ["MMProbeDrafter"],
                                                   "num_heads": 3, "image_weight": 1.0}))
    from safetensors.torch import save_file

    save_file({"one": torch.ones(1)}, str(probe / "model.safetensors"))
    return {"probe": probe,
            "attn_probe": claim_architecture(make_tiny_eagle(d / "attn-probe", target), "EagleMMProbeLlama")}


def attention_probe_runs(run: Callable[..., Any], site: str, tmp_path_factory: Any) -> dict[str, tuple]:
    """Per runner: ``(result, trace records, the forward's logged calls)`` of the attention probe, run by
    ``run(runner, "attn_probe", method=..., env=...)``; the calls are the last 3 per traced step (K=3 passes a
    step; vLLM's warm-up calls come first)."""
    runs = {}
    for runner in ("v1", "v2"):
        trace, log = tmp_path_factory.mktemp(f"attn-trace-{runner}"), tmp_path_factory.mktemp(f"attn-log-{runner}")
        r = run(runner, "attn_probe", method=METHOD,
                env={**with_pythonpath(site), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), "VSP_MM_PROBE_LOG": str(log)})
        records = load_trace(trace)
        calls = [torch.load(f, weights_only=True) for f in sorted(glob.glob(str(log / "*.pt")))]
        runs[runner] = (r, records, calls[len(calls) - 3 * len(records):])
    return runs
