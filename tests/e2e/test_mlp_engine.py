"""Real vLLM engines (CPU build) serving IBM's MLP speculator through the ``mlp_speculator`` plugin.

Oracles: greedy output with speculation equals greedy output without it, bit for bit,
with drafts accepted; the drafts equal a plain-torch reference written from fms-extras'
``generate_suffixes`` (tests/e2e/mlp_reference.py) on the very inputs the engine fed the
drafter, for untied and tied checkpoints (stored once or at every index), with and
without ``scale_input``, and under tensor parallelism 2. vLLM 0.32 has no oracle of its
own: its V1 engine cannot run the MLP speculator.
"""

from __future__ import annotations

import glob

import pytest
import torch

from tests.conftest import MAX_TOKENS, POLICY_OFF, PROMPTS
from tests.e2e.mlp_reference import MLPSpeculatorReference, load_checkpoint
from vllm_spec_plugins.testing.engine import run_engine

INFO_LINE = "vllm_spec_plugins: draft '{}' served by plugin 'mlp_speculator' (vllm-spec-mlp 0.1.0)"
TRACE = "VLLM_SPEC_PLUGINS_TRACE_DIR"


def _vllm_minor() -> tuple[int, int]:
    import vllm

    a, b = vllm.__version__.split(".")[:2]
    return int(a), int(b)


def _run(tiny, draft, tmp_path_factory, **kw):
    trace = tmp_path_factory.mktemp("mlp-trace")
    spec = {"model": str(tiny[draft]), "num_speculative_tokens": kw.pop("k", 3), **kw.pop("spec", {})}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                   env={TRACE: str(trace), **kw.pop("policy", POLICY_OFF)}, **kw)
    return r, trace


@pytest.fixture(scope="module")
def untied(tiny, tmp_path_factory):
    """Untied checkpoint, selected by its config alone (``--spec-model``), K = n_predict = 3."""
    return _run(tiny, "mlp", tmp_path_factory)


@pytest.fixture(scope="module")
def tied(tiny, tmp_path_factory):
    """Tied weights stored once, scale_input, 'speculator.' key prefix, n_predict=4 with K=3, named by method."""
    return _run(tiny, "mlp_tied", tmp_path_factory, spec={"method": "mlp_speculator"})


@pytest.fixture(scope="module")
def tp2(tiny, tmp_path_factory):
    """Tensor parallel 2 (two CPU workers); tied weights stored at every index, pytorch_model.bin; every step
    pinned to k=2 of K=3, so the forward is told num_drafts=2 (API 3) on both ranks."""
    return _run(tiny, "mlp_tied_all", tmp_path_factory, tensor_parallel_size=2,
                policy={"VLLM_SPEC_PLUGINS_POLICY": "2"})


def _compare(tiny, draft, trace, k, prefix=""):
    """Compare every traced drafting step with the reference; return (rows compared, records, ref)."""
    sd, cfg = load_checkpoint(tiny[draft])
    ref = MLPSpeculatorReference(sd, cfg, prefix=prefix)
    records = [torch.load(f, weights_only=False) for f in sorted(glob.glob(str(trace / "*.pt")))]
    assert records, "no drafting step was traced"
    compared = 0
    for rec in records:
        rows = rec["valid_count"] > 0
        assert rec["drafts"].shape[1] == k
        want = ref.drafts(rec["hidden_states"], rec["next_token_ids"], k)
        assert torch.equal(rec["drafts"][rows], want[rows])
        compared += int(rows.sum())
    assert compared >= len(PROMPTS) * 5
    return compared, records, ref


def _not_just_repeats(records) -> int:
    """Rows whose drafts are not all the last token again: the hidden state and the chain mattered."""
    return sum(int(((rec["drafts"] != rec["next_token_ids"][:, None].long()).any(dim=1)
                    & (rec["valid_count"] > 0)).sum()) for rec in records)


# -- untied -----------------------------------------------------------------------------


def test_untied_greedy_output_equals_no_speculation_with_accepted_drafts(baseline, untied):
    r, _ = untied
    assert r.outputs == baseline.outputs
    assert r.metrics["drafts"] > 0 and r.metrics["draft_tokens"] == 3 * r.metrics["drafts"]
    assert r.metrics["accepted"] > 0
    assert len(r.accepted_per_pos) == 3 and all(a > 0 for a in r.accepted_per_pos)


def test_untied_drafts_equal_torch_reference(tiny, untied):
    _, trace = untied
    _, records, _ = _compare(tiny, "mlp", trace, 3)
    assert _not_just_repeats(records) > 0, "every draft repeated the last token: the test cannot tell"


def test_info_lines(tiny, untied):
    r, _ = untied
    assert INFO_LINE.format(tiny["mlp"]) in r.log
    if _vllm_minor() == (0, 32):  # vLLM 0.32 loads model_type mlp_speculator with its own class first
        assert (f"vllm_spec_plugins: draft '{tiny['mlp']}' (model_type 'mlp_speculator'): config loaded with plugin "
                f"'mlp_speculator' class vllm_spec_mlp.config:MLPSpeculatorConfig instead of "
                f"vllm.transformers_utils.configs.mlp_speculator.MLPSpeculatorConfig") in r.log


# -- tied, scale_input, prefix, method alias, K < n_predict -----------------------------


def test_tied_greedy_output_equals_no_speculation(baseline, tied, tiny):
    r, _ = tied
    assert r.outputs == baseline.outputs
    assert r.metrics["accepted"] > 0 and len(r.accepted_per_pos) == 3
    assert INFO_LINE.format(tiny["mlp_tied"]) in r.log
    # the checkpoint's candidate tree (top_k_tokens_per_head [4, 3, 2, 2]) cannot be verified by vLLM: said at load
    assert "drafts the greedy chain (top-1 per head); its candidate tree top_k_tokens_per_head=[4, 3, 2, 2]" in r.log


def test_tied_scaled_drafts_equal_torch_reference(tiny, tied):
    _, trace = tied
    _, records, ref = _compare(tiny, "mlp_tied", trace, 3, prefix="speculator.")
    assert _not_just_repeats(records) > 0
    unscaled = sum(int((ref.drafts(rec["hidden_states"], rec["next_token_ids"], 3, scale_input=False)
                        != rec["drafts"])[rec["valid_count"] > 0].any(dim=1).sum()) for rec in records)
    assert unscaled > 0, "scale_input never changed a draft: the test cannot tell"


# -- tensor parallel 2 --------------------------------------------------------------------


def test_tensor_parallel_2(tiny, baseline, tp2):
    r, trace = tp2
    assert r.outputs == baseline.outputs
    assert r.metrics["accepted"] > 0
    ranks = {p.name.split("-")[0] for p in trace.glob("*.pt")}
    assert ranks == {"r0", "r1"}, ranks  # both workers drafted
    assert r.metrics["draft_tokens"] == 2 * r.metrics["drafts"]  # k=2 verified per drafting step
    _, records, _ = _compare(tiny, "mlp_tied_all", trace, 2)  # both ranks' records
    drafted = [rec for rec in records if rec["drafts"].shape[1]]
    assert drafted and all(rec["num_drafts"] == rec["forward_columns"] == 2 for rec in drafted)
    if _vllm_minor() == (0, 32):  # 0.32 sets draft TP 1 for mlp_speculator; heads drafters use the target's
        assert "draft tensor parallel size 1 -> 2" in r.log


# -- errors ---------------------------------------------------------------------------------


def test_more_tokens_than_n_predict_is_our_error(tiny):
    """K=4 > n_predict=3: vLLM's own rule (K divisible by n_predict) would fire first and name no plugin."""
    spec = {"model": str(tiny["mlp"]), "num_speculative_tokens": 4}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:1], max_tokens=4, check=False)
    assert r.returncode != 0
    assert "num_speculative_tokens=4" in r.log and "at most 3 tokens per step (n_predict=3)" in r.log
    assert "plugin 'mlp_speculator'" in r.log and "vllm-spec-mlp 0.1.0" in r.log
    assert "must be divisible by" not in r.log
