"""The adaptive drafting policy on real engines.

A test drafter (tests/plugins/oracle_drafter) reads its drafts from a table built from a
no-speculation run: right for a stretch of every request, then wrong, then right again,
so the policy must turn drafting off and back on mid-request; drafting has a cost the policy
must weigh, from a cost model (``VLLM_SPEC_PLUGINS_POLICY_COST_MODEL``) rather than the wall
clock, so that no machine load can change its decisions. Greedy output must not depend
on anything the policy decides.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vllm_spec_plugins.testing.engine import run_engine

V = 259
K = 3
MAX_TOKENS = 150
#: 4 requests whose drafts are right, then wrong, then right again (by generated-token index)
PHASED = [[1, 11, 12, 13], [1, 21, 22, 23, 24], [1, 31, 32], [1, 41, 42, 43, 44, 45]]
#: 4 requests whose drafts are always right, 4 whose drafts are always wrong
GOOD = [[1, 51, 52], [1, 61, 62, 63], [1, 71, 72, 73, 74], [1, 81]]
BAD = [[1, 91, 92], [1, 101, 102, 103], [1, 111, 112, 113, 114], [1, 121]]
ALL = PHASED + GOOD + BAD
#: the policy probes often and logs every change, so a short test sees it act. Its step costs come from a
#: cost model, not the wall clock: drafting k tokens costs (1 + k/3) plain steps (k=3: twice a plain step; a
#: clear loss while the drafts are wrong, about 1 token per step, a clear gain while they are right, 4 tokens
#: per step), so what the policy decides depends on the drafts alone, never on the machine's load. Wall-clock
#: timing and burned drafting cost made the phased test fail on a busy machine.
POLICY_ENV = {"VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL": "16", "VLLM_SPEC_PLUGINS_POLICY_LOG_INTERVAL": "0",
              "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL": "1,0.3333"}


def phased(g: int) -> bool:
    return g < 30 or g >= 80


@pytest.fixture(scope="module")
def reference(tiny):
    """Greedy output without speculation, for every prompt of this module."""
    return run_engine(tiny["target"], prompts=ALL, max_tokens=MAX_TOKENS).outputs


def make_oracle(path: Path, prompts, outputs, rules, burn: int) -> Path:
    """A table ``[position, token] -> K tokens``: the true continuation where ``rule(g)`` holds, else wrong ones."""
    table = torch.zeros(256, V, K, dtype=torch.int64)
    for prompt, out, rule in zip(prompts, outputs, rules):
        seq = prompt + out
        for i in range(len(prompt) - 1, len(seq) - 1):
            truth = [seq[i + 1 + j] if i + 1 + j < len(seq) else 0 for j in range(K)]
            g = i - (len(prompt) - 1)
            table[i, seq[i]] = torch.tensor(truth if rule(g) else [(t + 1) % V for t in truth])
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "vsp_oracle_test", "architectures": ["OracleTestDrafter"], "hidden_size": 128,
        "vocab_size": V, "num_heads": K, "max_positions": 256, "burn": burn}))
    save_file({"table": table, "work": torch.eye(256)}, str(path / "model.safetensors"))
    return path


def _run(tiny, ckpt: Path, prompts, stats: Path, **kw):
    spec = {"model": str(ckpt), "num_speculative_tokens": K}
    return run_engine(tiny["target"], speculative_config=spec, prompts=prompts, max_tokens=MAX_TOKENS,
                      env={**POLICY_ENV, "VLLM_SPEC_PLUGINS_POLICY_STATS": str(stats)}, **kw)


@pytest.fixture(scope="module")
def phased_run(tiny, reference, tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    ckpt = make_oracle(d / "oracle-phased", PHASED, reference[:4], [phased] * 4, burn=0)  # cost: POLICY_ENV
    r = _run(tiny, ckpt, PHASED, d / "stats.json")
    return r, json.loads((d / "stats.json").read_text())


def test_drafting_turned_off_and_back_on_mid_request_output_unchanged(phased_run, reference):
    r, stats = phased_run
    assert r.outputs == reference[:4]
    assert stats["switches_off"] >= 1 and stats["switches_on"] >= 1, stats
    assert stats["k_steps"]["0"] > 0 and stats["k_steps"][str(K)] > 0, stats
    log = r.log
    assert "adaptive drafting policy on for plugin 'oracletest'" in log
    assert "adaptive policy turned drafting off" in log and "adaptive policy turned drafting on" in log
    assert r.metrics["accepted"] > 0


def test_vllm_spec_decode_metrics_stay_exact(phased_run):
    """vLLM's counters count exactly the drafts that were verified: none for the k=0 steps."""
    r, stats = phased_run
    m = r.metrics
    assert m["draft_tokens"] == stats["verified_draft_tokens"] > 0
    assert m["accepted"] == stats["accepted_draft_tokens"] == sum(m["accepted_per_pos"])
    assert m["draft_tokens"] <= K * m["drafts"]


def test_accepted_drafts_follow_the_phases(phased_run):
    """Drafts were verified mostly while they were right: acceptance is high overall."""
    r, _ = phased_run
    assert r.metrics["accepted"] / r.metrics["draft_tokens"] > 0.5, r.metrics


@pytest.fixture(scope="module")
def mixed_run(tiny, reference, tmp_path_factory):
    """Requests with different acceptance side by side, under tensor parallel 2."""
    d = tmp_path_factory.mktemp("policy-mixed")
    rules = [lambda g: True] * 4 + [lambda g: False] * 4
    ckpt = make_oracle(d / "oracle-mixed", GOOD + BAD, reference[4:], rules, burn=0)
    r = _run(tiny, ckpt, GOOD + BAD, d / "stats.json", tensor_parallel_size=2)
    return r, json.loads((d / "stats.json").read_text())


def test_requests_with_different_acceptance_under_tp2(mixed_run, reference):
    r, stats = mixed_run
    assert r.outputs == reference[4:]
    assert r.metrics["accepted"] > 0
    # the requests whose drafts always fail stop being verified (re-probed now and then)
    assert stats["request_cuts"] > 0, stats
    # ... and the policy counts them: the steps it timed at k > 0 verified only part of the batch
    fractions = [f for v in stats["buckets"].values() for f in v["verified_fraction"].values()]
    assert fractions and min(fractions) < 0.9, stats["buckets"]
