"""The Medusa plugin through the conformance suite (vllm_spec_plugins.testing.conformance): real engines."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from vllm_spec_plugins.testing.conformance import ConformanceSuite
from vllm_spec_plugins.testing.fixtures import make_tiny_medusa


class TestMedusaConformance(ConformanceSuite):
    num_speculative_tokens = 3

    def make_draft(self, path, target):
        return make_tiny_medusa(path, target, num_heads=3)

    def reference(self, record, draft, target):
        """Medusa-1 heads in plain torch on the traced target hidden states."""
        sd = load_file(str(draft / "medusa_lm_head.safetensors"))
        h = record["inputs"]["hidden_states"]
        return torch.stack([((h + torch.nn.functional.silu(h @ sd[f"blocks.{i}.layers.0.weight"].T))
                             @ sd[f"lm_heads.{i}.weight"].T).argmax(-1) for i in range(3)], dim=1)
