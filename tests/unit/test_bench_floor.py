"""``bench.floor``'s rows: the k = 0 floor as before, and ``--k`` for drafting steps (no engine started)."""

from __future__ import annotations

from pathlib import Path

from bench.floor import WHOLE, floor_rows, kv_only_rows, step_tokens

D = Path("/drafts")


def test_the_floor_rows_are_the_documented_ones():
    rows = floor_rows(D)
    assert list(rows) == ["no speculation", "our EAGLE-1, k=0", "our EAGLE-1, k=0, first pass every step",
                          "vLLM EAGLE-1, k=0 schedule", "our EAGLE-3, k=0", "our Medusa, k=0"]
    assert rows["no speculation"] == (None, {})
    assert rows["our EAGLE-1, k=0, first pass every step"][1] == {"VLLM_SPEC_PLUGINS_POLICY": "0",
                                                                  "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP": "0"}
    spec, env = rows["vLLM EAGLE-1, k=0 schedule"]
    assert spec["num_speculative_tokens_per_batch_size"] == [(1, 16, 0)] and env == {"VLLM_SPEC_PLUGINS": ""}


def test_drafting_rows_are_pinned_to_k_where_the_drafter_reaches_it():
    rows = floor_rows(D, 1, Path("/cache/eagle-full-vocab"), Path("/cache/medusa-full-vocab"))
    assert list(rows) == ["no speculation", "our EAGLE-1, k=1", "our EAGLE-1, full vocabulary, k=1",
                          "vLLM EAGLE-1, k=1 schedule", "our EAGLE-3, k=1", "our Medusa, k=1",
                          "our Medusa, full vocabulary, k=1"]
    assert all(env == {"VLLM_SPEC_PLUGINS_POLICY": "1"} for name, (_, env) in rows.items() if name.startswith("our"))
    assert rows["vLLM EAGLE-1, k=1 schedule"][0]["num_speculative_tokens_per_batch_size"] == [(1, 16, 1)]
    # the shipped draft with its draft vocabulary; vLLM's EAGLE-1, which has none, and ours without it: the copy
    assert rows["our EAGLE-1, k=1"][0]["model"] == "/drafts/smollm2-eagle"
    assert rows["our EAGLE-1, full vocabulary, k=1"][0]["model"] == "/cache/eagle-full-vocab"
    assert rows["vLLM EAGLE-1, k=1 schedule"][0]["model"] == "/cache/eagle-full-vocab"
    assert rows["our Medusa, k=1"][0]["model"] == "/drafts/smollm2-medusa"
    assert rows["our Medusa, full vocabulary, k=1"][0]["model"] == "/cache/medusa-full-vocab"
    rows = floor_rows(D, 3)  # only the EAGLE-3 draft has K = 3
    assert list(rows) == ["no speculation", "our EAGLE-3, k=3"]
    assert rows["our EAGLE-3, k=3"] == ({"model": "/drafts/smollm2-eagle3", "num_speculative_tokens": 3},
                                        {"VLLM_SPEC_PLUGINS_POLICY": "3"})


def test_each_row_profiles_its_own_steps():
    """With ``--k``, the speculative rows profile steps of 1 + k tokens per request, no speculation its plain ones."""
    assert step_tokens({"spec": None, "k": 2}) == 1
    assert step_tokens({"spec": {"model": "d"}, "k": 2}) == 3
    assert step_tokens({"spec": {"model": "d"}}) == 1


def test_kv_only_rows_pair_each_eagle_draft_with_its_whole_forward():
    """``--kv-only``: each EAGLE draft pinned to k = 0 twice, the second with ``VLLM_SPEC_PLUGINS_KV_ONLY=0`` (its
    whole forward in the passes whose outputs are discarded); the same config otherwise."""
    rows = kv_only_rows(D)
    assert list(rows) == ["no speculation", "our EAGLE-1, k=0", f"our EAGLE-1, k=0, {WHOLE}", "our EAGLE-3, k=0",
                          f"our EAGLE-3, k=0, {WHOLE}"]
    for name in ("our EAGLE-1, k=0", "our EAGLE-3, k=0"):
        (spec, env), (spec0, env0) = rows[name], rows[f"{name}, {WHOLE}"]
        assert spec == spec0 and env == {"VLLM_SPEC_PLUGINS_POLICY": "0"}
        assert env0 == {"VLLM_SPEC_PLUGINS_POLICY": "0", "VLLM_SPEC_PLUGINS_KV_ONLY": "0"}
