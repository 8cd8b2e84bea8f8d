"""Real vLLM engines (CPU build) serving the EAGLE plugin's EAGLE-3 drafter.

EAGLE-3 is an attention drafter that consumes chosen target layers
(``aux_layer_ids``): the shim routes it to vLLM's ``eagle3`` method (aux hidden-state
outputs on) and combines the layers with the model's ``combine_hidden_states`` before
vLLM's drafting loop. Oracles: greedy output equals output without speculation, bit
for bit; on vLLM 0.32 vLLM's built-in EAGLE-3 on the same checkpoint proposes the same
drafts (same counts, same per-position acceptance) through requests of different
lengths that finish, requests joining mid-stream and preemption.

The checkpoint (``make_tiny_eagle3``) has a truncated draft vocabulary (``d2t``), own
embeddings and lm_head, and aux layer ids ``[0, 1, 2]`` of the 2-layer target.
"""

from __future__ import annotations

import glob

import pytest
import torch

from tests.conftest import EAGLE_LENGTHS, MAX_TOKENS, POLICY_OFF, PROMPTS
from vllm_spec_plugins.testing.engine import run_engine

# As in test_eagle_engine.py: different lengths, joins mid-stream, 3 KV blocks for up to 4 long requests.
LENGTHS = EAGLE_LENGTHS
SCHEDULE = [{"step": 0, "add": [0, 1, 2]}, {"step": 5, "add": [3]}, {"step": 20, "add": [4, 5]}]
BUSY = {"num_gpu_blocks_override": 3, "max_num_seqs": 4, "max_model_len": 256}
INFO = "vllm_spec_plugins: draft '{}' served by plugin 'eagle' (vllm-spec-eagle 0.1.0)"


def _spec(tiny, **kw):
    return {"model": str(tiny["eagle3"]), "num_speculative_tokens": 3, **kw}


@pytest.fixture(scope="module")
def ours(tiny, tmp_path_factory):
    trace = tmp_path_factory.mktemp("eagle3-trace")
    # "method": "eagle" names our plugin; its EAGLE-3 drafter is picked from the checkpoint's config.json
    # (architectures LlamaForCausalLMEagle3) and routed to vLLM's eagle3 method.
    r = run_engine(tiny["target"], speculative_config=_spec(tiny, method="eagle"), prompts=PROMPTS,
                   max_tokens=LENGTHS, schedule=SCHEDULE, llm_kwargs=BUSY,
                   env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **POLICY_OFF})
    files = sorted(glob.glob(str(trace / "*.pt")))
    assert files, "no drafting step was traced"
    return r, [torch.load(f, weights_only=True) for f in files]


def test_greedy_output_equals_no_speculation(ours, baseline_eagle_lengths):
    r, _ = ours
    assert [len(o) for o in r.outputs] == LENGTHS
    assert r.outputs == baseline_eagle_lengths.outputs  # every token of every request
    assert r.metrics["accepted"] > 0 and all(a > 0 for a in r.accepted_per_pos)
    assert r.metrics["preemptions"] > 0


def test_served_by_the_eagle_plugin_on_the_eagle3_route(ours, tiny):
    r, _ = ours
    assert INFO.format(tiny["eagle3"]) in r.log
    assert "method='eagle3'" in r.log
    assert "Using auxiliary layers from speculative config: (0, 1, 2)" in r.log


def test_target_layers_combined_and_draft_vocab_mapped(ours, tiny):
    from safetensors.torch import load_file

    _, records = ours
    sd = load_file(str(tiny["eagle3"] / "model.safetensors"))
    in_draft_vocab = set(sd["t2d"].nonzero().flatten().tolist())
    draft_vocab = sd["d2t"].numel()
    seen: set[int] = set()
    for rec in records:
        T = rec["target_token_ids"].shape[0]
        assert rec["target_hidden_states"].shape == (T, 3 * 128)  # aux layers 0, 1, 2 of the target
        assert rec["combined_hidden_states"].shape == (T, 128)
        seen |= set(rec["drafts"].flatten().tolist())
    assert seen <= in_draft_vocab
    assert max(seen) >= draft_vocab, "no draft above the draft vocabulary: d2t offsets untested"


@pytest.mark.skipif(__import__("vllm").__version__.split(".")[:2] != ["0", "32"], reason="oracle run on vLLM 0.32")
def test_parity_with_vllm_builtin_eagle3(ours, tiny):
    r, _ = ours
    # vLLM alone: no "method", the folder name (tiny-eagle3) picks eagle3; vLLM's Eagle3LlamaForCausalLM serves it.
    builtin = run_engine(tiny["target"], speculative_config=_spec(tiny), prompts=PROMPTS, max_tokens=LENGTHS,
                         schedule=SCHEDULE, llm_kwargs=BUSY, env={"VLLM_SPEC_PLUGINS": ""})
    assert "served by plugin" not in builtin.log
    assert "method='eagle3'" in builtin.log
    assert builtin.metrics["preemptions"] > 0
    assert builtin.outputs == r.outputs
    assert builtin.metrics["drafts"] == r.metrics["drafts"]
    assert builtin.metrics["draft_tokens"] == r.metrics["draft_tokens"]
    assert builtin.accepted_per_pos == r.accepted_per_pos


def _drafts(trace) -> dict[str, torch.Tensor]:
    """Each request's draft rows in step order (a request's drafts follow from its own tokens only, so
    they compare across runs whose steps batch requests differently)."""
    files = sorted(glob.glob(str(trace / "*.pt")), key=lambda f: torch.load(f, weights_only=True)["step"])
    assert files, "no drafting step was traced"
    rows: dict[str, list[torch.Tensor]] = {}
    for f in files:
        rec = torch.load(f, weights_only=True)
        for i, req in enumerate(rec["req_ids"]):
            rows.setdefault(req.split("-")[0], []).append(rec["drafts"][i])  # vLLM appends a random suffix
    return {req: torch.stack(r) for req, r in rows.items()}


def _agreement(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[int, int]:
    assert sorted(a) == sorted(b)
    equal = total = 0
    for req in a:
        n = min(len(a[req]), len(b[req]))
        equal += int((a[req][:n] == b[req][:n]).sum())
        total += a[req][:n].numel()
    return equal, total


@pytest.fixture(scope="module")
def target_rows_runs(tiny, tmp_path_factory):
    """The same draft with the target's lm_head rows stored, and not stored (d2t only), at TP=1 and TP=2."""
    runs = {}
    for key, tp in (("eagle3_rows", 1), ("eagle3_no_head", 1), ("eagle3_rows", 2), ("eagle3_no_head", 2)):
        trace = tmp_path_factory.mktemp(f"{key}-tp{tp}")
        r = run_engine(tiny["target"], speculative_config={"model": str(tiny[key]), "num_speculative_tokens": 3},
                       prompts=PROMPTS, max_tokens=MAX_TOKENS, tensor_parallel_size=tp,
                       env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **POLICY_OFF})
        runs[key, tp] = (r, _drafts(trace))
    return runs


def test_draft_vocab_without_lm_head_takes_the_target_rows(target_rows_runs, tiny, baseline):
    """d2t without lm_head.weight: the plugin uses the target lm_head's rows of the draft vocabulary,
    so its drafts equal those of the checkpoint that stores exactly those rows. (vLLM's built-in EAGLE-3
    would slice the target head to its first rows; with these d2t offsets that gives other drafts.)"""
    stored, no_head = target_rows_runs["eagle3_rows", 1], target_rows_runs["eagle3_no_head", 1]
    for r, _ in (stored, no_head):
        assert r.outputs == baseline.outputs
        assert INFO.format(tiny["eagle3_no_head"]) in no_head[0].log
    assert no_head[0].metrics["accepted"] > 0
    equal, total = _agreement(stored[1], no_head[1])
    assert total >= 100 and equal >= 0.98 * total, (equal, total)


def test_draft_vocab_without_lm_head_tensor_parallel_2(target_rows_runs, tiny, baseline):
    """Under TP=2 the target's lm_head is split by vocabulary: each rank holds half the rows, so the
    rows must be gathered across ranks (an all-reduce) to give the drafts of the stored rows."""
    stored, no_head = target_rows_runs["eagle3_rows", 2], target_rows_runs["eagle3_no_head", 2]
    for r, _ in (stored, no_head):
        assert r.outputs == baseline.outputs
        assert "served by plugin 'eagle'" in r.log
    equal, total = _agreement(stored[1], no_head[1])
    assert total >= 100 and equal >= 0.98 * total, (equal, total)
