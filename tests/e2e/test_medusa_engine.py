"""Real vLLM engines (CPU build) serving the Medusa plugin.

Oracles: greedy output with speculation equals greedy output without it, bit for
bit; on vLLM 0.32 the built-in Medusa gives the same per-position acceptance as our
plugin on the same bias-free checkpoint; with biases, our drafts equal a plain-torch
reference of the Medusa heads on the very hidden states the engine fed them.
"""

from __future__ import annotations

import glob

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import MAX_TOKENS, POLICY_OFF, PROMPTS, with_pythonpath
from vllm_spec_plugins.testing.engine import run_engine

INFO_LINE = "vllm_spec_plugins: draft '{}' served by plugin 'medusa' (vllm-spec-medusa 0.1.0)"


def _vllm_minor() -> tuple[int, int]:
    import vllm

    a, b = vllm.__version__.split(".")[:2]
    return int(a), int(b)


@pytest.fixture(scope="module")
def ours(tiny, broken_plugin_path):
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": 3}
    return run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                      env={**with_pythonpath(broken_plugin_path), **POLICY_OFF})


def test_plain_vllm_starts_with_broken_and_exiting_plugins_installed(baseline):
    assert "brokenthing" in baseline.log and "vsp-test-broken-plugin 6.6.6" in baseline.log
    assert "this_module_does_not_exist_anywhere" in baseline.log
    # a plugin whose import exits (argparse's parse_args() on vLLM's command line): skipped, named, plain vLLM runs
    assert "skipping plugin 'exitingthing'" in baseline.log and "vsp-test-exiting-plugin 0.0.2" in baseline.log
    assert "SystemExit: 2" in baseline.log
    assert len(baseline.outputs) == len(PROMPTS) and all(len(o) == MAX_TOKENS for o in baseline.outputs)


def test_greedy_output_equals_no_speculation(baseline, ours):
    assert ours.outputs == baseline.outputs
    assert ours.metrics["drafts"] > 0 and ours.metrics["draft_tokens"] == 3 * ours.metrics["drafts"]
    assert ours.metrics["accepted"] > 0
    assert len(ours.accepted_per_pos) == 3 and ours.accepted_per_pos[0] > 0


def test_info_line_names_plugin_distribution_and_version(tiny, ours):
    assert INFO_LINE.format(tiny["medusa"]) in ours.log
    # vLLM 0.32 loads model_type medusa with its own MedusaConfig; the plugin's class replaces it, and says so
    assert (f"draft '{tiny['medusa']}' (model_type 'medusa'): config loaded with plugin 'medusa' class "
            f"vllm_spec_medusa.config:MedusaConfig instead of vllm.") in ours.log


@pytest.mark.skipif(_vllm_minor() != (0, 32), reason="vLLM 0.33 removed the built-in Medusa oracle")
def test_parity_with_vllm_builtin_medusa(tiny, ours, baseline):
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": 3}
    builtin = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                         env={"VLLM_SPEC_PLUGINS": ""})
    assert "vllm_spec_plugins" not in builtin.log  # an empty allow-list means: as if not installed
    assert builtin.outputs == baseline.outputs
    assert builtin.metrics["drafts"] == ours.metrics["drafts"]
    assert builtin.accepted_per_pos == ours.accepted_per_pos


def _reference_drafts(ckpt_sd: dict, hidden: torch.Tensor, k: int, num_layers: int, bias: bool) -> torch.Tensor:
    out = []
    for h in range(k):
        x = hidden
        for layer in range(num_layers):
            w = ckpt_sd[f"{h}.{layer}.linear.weight"]
            b = ckpt_sd[f"{h}.{layer}.linear.bias"] if bias else None
            x = x + F.silu(F.linear(x, w, b))
        out.append(F.linear(x, ckpt_sd[f"{h}.{num_layers}.weight"]).argmax(-1))
    return torch.stack(out, dim=1)


def test_old_layout_with_biases_matches_torch_reference(tiny, baseline, tmp_path):
    """FasterDecoding layout (.pt, {h}.{l}.linear.*, medusa_num_heads, no model_type, no hidden_size or
    vocab_size: the target's are used), biases kept, K < heads."""
    trace = tmp_path / "trace"
    spec = {"model": str(tiny["medusa_old_bias"]), "num_speculative_tokens": 2, "method": "medusa"}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                   env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **POLICY_OFF})
    assert r.outputs == baseline.outputs
    assert INFO_LINE.format(tiny["medusa_old_bias"]) in r.log
    sd = torch.load(tiny["medusa_old_bias"] / "medusa_lm_head.pt", weights_only=True)
    records = [torch.load(f, weights_only=True) for f in sorted(glob.glob(str(trace / "*.pt")))]
    assert records, "no drafting step was traced"
    compared = differs_without_bias = 0
    for rec in records:
        rows = rec["valid_count"] > 0
        assert rec["drafts"].shape[1] == 2
        ref = _reference_drafts(sd, rec["hidden_states"], 2, 1, bias=True)
        assert torch.equal(rec["drafts"][rows], ref[rows])
        no_bias = _reference_drafts(sd, rec["hidden_states"], 2, 1, bias=False)
        differs_without_bias += int((no_bias[rows] != ref[rows]).any(dim=1).sum())
        compared += int(rows.sum())
    assert compared >= len(PROMPTS) * 5
    assert differs_without_bias > 0, "the checkpoint biases never changed a draft: the test cannot tell"


def test_more_tokens_than_heads_is_an_error(tiny):
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": 5}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:1], max_tokens=4, check=False)
    assert r.returncode != 0
    assert "num_speculative_tokens=5" in r.log and "at most 3 tokens per step" in r.log
    assert "plugin 'medusa'" in r.log and "vllm-spec-medusa 0.1.0" in r.log


def test_requesting_a_broken_plugin_says_how_to_fix_or_skip_it(tiny, broken_plugin_path):
    spec = {"model": str(tiny["medusa"]), "num_speculative_tokens": 3, "method": "brokenthing"}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS[:1], max_tokens=4, check=False,
                   env=with_pythonpath(broken_plugin_path))
    assert r.returncode != 0
    assert "plugin 'brokenthing' (entry point brokenthing = vsp_broken_plugin, vsp-test-broken-plugin 6.6.6)" in r.log
    assert "ModuleNotFoundError" in r.log and "pip uninstall vsp-test-broken-plugin" in r.log
    assert "VLLM_SPEC_PLUGINS" in r.log


def _load_sd(path):
    files = list(path.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        return load_file(str(files[0]))
    return torch.load(next(iter(path.glob("*.bin"))), weights_only=True)


def _traced(trace):
    records = [torch.load(f, weights_only=True) for f in sorted(glob.glob(str(trace / "*.pt")))]
    assert records, "no drafting step was traced"
    return records


def _lm_head_reference(sd, rec, target, heads=3, use_map=True):
    """The Medusa heads in plain torch on the hidden states the engine fed them: per head the argmax over its
    lm_head (its own, the checkpoint's shared one or the target's), over the token_map's rows when there is one."""
    from vllm_spec_plugins.testing.fixtures import target_lm_head

    token_map = sd.get("token_map") if use_map else None
    out = []
    for h in range(heads):
        x = rec["hidden_states"]
        x = x + F.silu(F.linear(x, sd[f"blocks.{h}.layers.0.weight"]))
        lm = sd.get(f"lm_heads.{h}.weight", sd.get("lm_head.weight"))
        if lm is None:
            lm = target_lm_head(target)
            if token_map is not None:
                lm = lm[token_map]
        ids = F.linear(x, lm).argmax(-1)
        out.append(token_map[ids] if token_map is not None else ids)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("ckpt", ["medusa_shared_bin", "medusa_token_map"], ids=["shared-target-lm-head-bin",
                                                                               "truncated-vocab-token-map"])
def test_lm_head_variants_match_torch_reference(tiny, baseline, tmp_path, ckpt):
    """original_lm_head without an lm_head in the checkpoint (shares the target's), .bin; and token_map."""
    trace = tmp_path / "trace"
    spec = {"model": str(tiny[ckpt]), "num_speculative_tokens": 3}
    r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                   env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **POLICY_OFF})
    assert r.outputs == baseline.outputs
    assert r.metrics["accepted"] > 0
    sd = _load_sd(tiny[ckpt])
    compared = 0
    for rec in _traced(trace):
        rows = rec["valid_count"] > 0
        assert torch.equal(rec["drafts"][rows], _lm_head_reference(sd, rec, tiny["target"])[rows])
        compared += int(rows.sum())
    assert compared >= len(PROMPTS) * 5


@pytest.fixture(scope="module")
def vocab_runs(tiny, tmp_path_factory):
    """The Medusa draft with a draft vocabulary over the target's lm_head (token_map, original_lm_head, no lm_head
    stored), traced, at TP=1 and TP=2. TP=2 with the processes vLLM's CPU build starts, spawned: each worker a fresh
    interpreter that discovers the plugins itself (the other TP=2 engine tests fork them, as vLLM does where the
    platform allows it)."""
    runs = {}
    for tp in (1, 2):
        trace = tmp_path_factory.mktemp(f"medusa-vocab-tp{tp}")
        spec = {"model": str(tiny["medusa_vocab"]), "num_speculative_tokens": 3}
        r = run_engine(tiny["target"], speculative_config=spec, prompts=PROMPTS, max_tokens=MAX_TOKENS,
                       tensor_parallel_size=tp, env={"VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace), **POLICY_OFF},
                       start_method="spawn" if tp == 2 else "fork")
        runs[tp] = (r, _traced(trace))
    return runs


def test_tensor_parallel_2_equals_tp1(vocab_runs, baseline):
    """Spawned TP=2 workers (above): output equal to no speculation, acceptance equal to TP=1, position by
    position."""
    (r1, _), (r2, _) = vocab_runs[1], vocab_runs[2]
    assert r2.outputs == baseline.outputs
    assert r2.accepted_per_pos == r1.accepted_per_pos


@pytest.mark.parametrize("tp", [1, 2])
def test_draft_vocabulary_over_the_target_lm_head(vocab_runs, tiny, baseline, tp):
    """token_map with the target's lm_head shared: every head's draft is the argmax over the target lm_head's rows of
    the token_map (a plain-torch reference), never a token outside it. Under TP=2 each rank holds half the target
    head's rows, gathered across ranks. The same reference over the full vocabulary disagrees: the test can tell."""
    r, records = vocab_runs[tp]
    assert r.outputs == baseline.outputs
    assert INFO_LINE.format(tiny["medusa_vocab"]) in r.log
    assert r.metrics["accepted"] > 0
    sd = _load_sd(tiny["medusa_vocab"])
    seen = set(torch.cat([rec["drafts"].flatten() for rec in records]).tolist())
    assert seen <= set(sd["token_map"].tolist())
    compared = differ = 0
    for rec in records:
        rows = rec["valid_count"] > 0
        assert torch.equal(rec["drafts"][rows], _lm_head_reference(sd, rec, tiny["target"])[rows])
        full = _lm_head_reference(sd, rec, tiny["target"], use_map=False)[rows]
        compared += int(rows.sum())
        differ += int((full != rec["drafts"][rows]).any(dim=1).sum())
    assert compared >= len(PROMPTS) * 5
    assert differ > 0, "the token_map never changed a draft: the test cannot tell"
