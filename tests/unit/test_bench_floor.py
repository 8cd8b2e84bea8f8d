"""``bench.floor``'s rows: the k = 0 floor as before, and ``--k`` for drafting steps (no engine started)."""

from __future__ import annotations

from pathlib import Path

from bench.floor import floor_rows, step_tokens

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
    rows = floor_rows(D, 1)
    assert list(rows) == ["no speculation", "our EAGLE-1, k=1", "vLLM EAGLE-1, k=1 schedule", "our EAGLE-3, k=1",
                          "our Medusa, k=1"]
    assert all(env == {"VLLM_SPEC_PLUGINS_POLICY": "1"} for name, (_, env) in rows.items() if name.startswith("our"))
    assert rows["vLLM EAGLE-1, k=1 schedule"][0]["num_speculative_tokens_per_batch_size"] == [(1, 16, 1)]
    rows = floor_rows(D, 3)  # only the EAGLE-3 draft has K = 3
    assert list(rows) == ["no speculation", "our EAGLE-3, k=3"]
    assert rows["our EAGLE-3, k=3"] == ({"model": "/drafts/smollm2-eagle3", "num_speculative_tokens": 3},
                                        {"VLLM_SPEC_PLUGINS_POLICY": "3"})


def test_each_row_profiles_its_own_steps():
    """With ``--k``, the speculative rows profile steps of 1 + k tokens per request, no speculation its plain ones."""
    assert step_tokens({"spec": None, "k": 2}) == 1
    assert step_tokens({"spec": {"model": "d"}, "k": 2}) == 3
    assert step_tokens({"spec": {"model": "d"}}) == 1
