"""The recurrent API-2 test plugin through the conformance suite (vllm_spec_plugins.testing.conformance).

Other users of the suite: the state-carrying test plugin (tests/e2e/test_state_plugin.py), the
Medusa plugin (plugins/medusa/tests/test_conformance.py) and the template (tests/e2e/test_template.py).
"""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from vllm_spec_plugins.testing.conformance import ConformanceSuite


class TestRecurrentDrafterConformance(ConformanceSuite):
    """API 2 (tests/plugins/recurrent_drafter): a learned initial state and the prompt folded from the
    scheduled tokens; through preemption (on_preempt="reset": the recomputed sequence is folded again)."""

    num_speculative_tokens = 3
    H0 = [0, 777]

    def make_draft(self, path, target):
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps({
            "model_type": "vsp_recurrent_test", "architectures": ["RecurrentTestDrafter"], "hidden_size": 128,
            "vocab_size": 259, "num_heads": 3}))
        save_file({"h0": torch.tensor(self.H0)}, str(path / "model.safetensors"))
        return path

    def reference(self, record, draft, target):
        return record["inputs"]["next_token_ids"].to(torch.int64)[:, None].expand(-1, 3)

    def replay_state(self, prompt, generated, draft):
        from vsp_recurrent_drafter.model import replay

        return {"h": torch.tensor(replay(self.H0, (prompt + generated)[:-1]))}
