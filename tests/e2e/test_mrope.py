"""Plugin drafters under an M-RoPE vision-language target, real CPU engines, both model runners.

The target is the test kit's tiny PaddleOCR-VL (:func:`vllm_spec_plugins.testing.fixtures.make_tiny_mrope_vlm`:
random weights, multimodal rotary positions in three sections, 4 tokens per image). Oracles:

* EAGLE-1's draft (as the attention probe) and a heads drafter (the probe) serve it with image prompts on V1 and on MRV2: greedy
  output equals no speculation, drafts are accepted, the same counts on both runners; the outputs differ from
  image to image; the attention probe's first pass gets the target's M-RoPE rows, its later passes zeros;
* the API-3 position sources are the target's M-RoPE positions: ``POSITIONS_ALL`` rows equal what
  Transformers' ``get_rope_index`` gives for the prompt (an image's tokens advance over its 2x2 grid, text
  resumes one past the largest section) and one per token after it, through a chunked prefill that splits the
  image; ``NEXT_POSITIONS`` and ``POSITIONS_LAST`` are the next text token's; V1 and MRV2 trace the same values.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import POLICY_OFF, with_pythonpath
from tests.e2e.mm_probe import attention_probe_runs, probe_checkpoints
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.engine import run_engine
from vllm_spec_plugins.testing.fixtures import (
    MROPE_VLM_IMAGE_TOKENS,
    MROPE_VLM_PROMPT,
    make_test_image,
    make_tiny_mrope_vlm,
    target_embeddings,
)

IMAGE_KINDS = ("red", "pattern", "stripes")
TEXT_PROMPT = "<s>User: Hello there\nAssistant: "
MAX_TOKENS = 16
MM = {"limit_mm_per_prompt": {"image": 1}}
CHUNKED = {**MM, "max_num_batched_tokens": 8}  # the image's tokens (prompt positions 8-11) span two chunks
IMAGE_TOKEN = 259


@pytest.fixture(scope="module")
def mv(tmp_path_factory):
    d = tmp_path_factory.mktemp("mrope")
    target = make_tiny_mrope_vlm(d / "tiny-mrope-vlm")
    return {"target": target, "images": [make_test_image(d / f"{k}.png", k) for k in IMAGE_KINDS],
            **probe_checkpoints(d, target)}


@pytest.fixture(scope="module")
def site(mm_probe_site):
    return mm_probe_site


def _run(mv, runner, draft=None, *, llm_kwargs=MM, env=None, method=None):
    spec = None if draft is None else {"model": str(mv[draft]), "num_speculative_tokens": 3,
                                        **({"method": method} if method else {})}
    return run_engine(mv["target"], speculative_config=spec, text_prompts=[MROPE_VLM_PROMPT] * 3 + [TEXT_PROMPT],
                      images=[*mv["images"], None], max_tokens=MAX_TOKENS, llm_kwargs=llm_kwargs,
                      env={**POLICY_OFF, **(env or {})}, runner=runner)


@pytest.fixture(scope="module")
def base(mv):
    return {runner: _run(mv, runner) for runner in ("v1", "v2")}


@pytest.fixture(scope="module")
def attn_runs(mv, site, tmp_path_factory):
    """The attention probe (EAGLE-1's draft, taking the token-row sources) through a chunked prefill."""
    return attention_probe_runs(lambda runner, draft, **kw: _run(mv, runner, draft, llm_kwargs=CHUNKED, **kw),
                                site, tmp_path_factory)


def test_eagle_serves_the_mrope_vlm_on_both_runners(mv, base, attn_runs):
    """EAGLE-1's draft (the attention probe) on both runners: output equal to no speculation, drafts accepted, the
    same counts; its first pass gets the target's M-RoPE rows (``POSITIONS_ALL`` ``[3]``), its later passes zeros.
    (A heads drafter: the probe below.)"""
    assert len({tuple(o) for o in base["v1"].outputs}) == 4, "each image (and the text prompt): its own output"
    assert base["v2"].outputs == base["v1"].outputs
    ref = _reference_positions(mv)
    for runner, (r, records, calls) in attn_runs.items():
        assert r.outputs == base[runner].outputs, runner
        assert r.metrics["accepted"] > 0, runner
        assert len(records) > 10 and len(calls) == 3 * len(records), runner
        start: dict[str, int] = {}
        for i, rec in enumerate(records):
            x, first = rec["inputs"], calls[3 * i]
            T = x["tokens"].shape[0]
            for key in ("tokens", "pos", "is_mm", "embeds"):
                assert torch.equal(first[key][:T], x[key]), (runner, i, key)
            _check_positions(rec, ref, start, runner)
            for c in calls[3 * i + 1:3 * i + 3]:
                assert not c["pos"].any() and not c["embeds"].any() and not c["is_mm"].any()
    a, b = attn_runs["v1"][0], attn_runs["v2"][0]
    assert a.metrics["drafts"] == b.metrics["drafts"] and a.accepted_per_pos == b.accepted_per_pos


def _check_positions(rec, ref, start, runner):
    """Every request's traced ``POSITIONS_ALL`` rows this step against the reference; advances ``start`` (each
    request's sequence index of its next scheduled token). Returns ``(rows, next position)`` per request."""
    x, first, out = rec["inputs"], 0, {}
    assert x["pos"].shape[1:] == (3,)
    for row, rid in enumerate(rec["req_ids"]):
        rid, n = base_request_id(rid), int(x["counts"][row])
        s, L = start.get(rid, 0), ref[rid].shape[1]
        want = torch.stack([_position(ref[rid], j) for j in range(s, s + n)])
        assert torch.equal(x["pos"][first:first + n], want), (runner, rid, s)
        kept = n if s < L else int(rec["valid_count"][row])  # a prompt chunk's rows, or the accepted
        out[rid] = (slice(first, first + n), want[kept - 1].max() + 1)  # the next text token's, every section
        start[rid] = s + kept
        first += n
    return out


def _reference_positions(mv) -> dict[str, torch.Tensor]:
    """Per request: the M-RoPE positions ``[3, prompt_len]`` of its prompt, as Transformers computes them."""
    from PIL import Image
    from transformers import AutoProcessor, PaddleOCRVLForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(mv["target"]))
    model = PaddleOCRVLForConditionalGeneration.from_pretrained(str(mv["target"]), dtype=torch.float32).eval()
    out = {}
    for i, path in enumerate(mv["images"]):
        enc = processor(text=[MROPE_VLM_PROMPT], images=[Image.open(path).convert("RGB")], return_tensors="pt")
        pos, _ = model.model.get_rope_index(enc["input_ids"], enc["mm_token_type_ids"],
                                            image_grid_thw=enc["image_grid_thw"])
        out[str(i)] = pos[:, 0]
    n = len(processor.tokenizer(TEXT_PROMPT, add_special_tokens=False)["input_ids"])
    out["3"] = torch.arange(n).expand(3, n)
    return out


def _position(ref: torch.Tensor, j: int) -> torch.Tensor:
    """The M-RoPE position ``[3]`` of sequence index ``j``: the prompt's, then one per token past its largest."""
    if j < ref.shape[1]:
        return ref[:, j]
    return (ref.max() + 1 + j - ref.shape[1]).expand(3)


@pytest.fixture(scope="module")
def probe_runs(mv, site, tmp_path_factory):
    runs = {}
    for runner in ("v1", "v2"):
        trace = tmp_path_factory.mktemp(f"mrope-probe-{runner}")
        r = _run(mv, runner, "probe", llm_kwargs=CHUNKED,
                 env={**with_pythonpath(site), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)})
        runs[runner] = (r, load_trace(trace))
    return runs


def test_the_position_sources_are_the_target_s_mrope_positions(mv, base, probe_runs):
    ref = _reference_positions(mv)
    table = target_embeddings(mv["target"])
    assert any(not torch.equal(r[0], r[1]) for r in ref.values()), "no image moved the sections apart"
    for runner, (r, records) in probe_runs.items():
        assert r.outputs == base[runner].outputs, runner
        assert r.metrics["accepted"] > 0, runner
        start: dict[str, int] = {}
        split = rows = 0
        for rec in records:
            x = rec["inputs"]
            assert x["next_pos"].shape[1:] == (3,)
            for row, (rid, (sl, nxt)) in enumerate(_check_positions(rec, ref, start, runner).items()):
                tokens = x["tokens"][sl].to(torch.int64)
                mm = tokens == IMAGE_TOKEN
                assert torch.equal(x["is_mm"][sl], mm)
                assert torch.equal(x["embeds"][sl][~mm], table[tokens[~mm]])
                split += int(0 < int(mm.sum()) < MROPE_VLM_IMAGE_TOKENS)
                assert torch.equal(x["next_pos"][row], nxt.expand(3)), (runner, rid)
                assert int(x["positions"][row]) == int(nxt), (runner, rid)  # POSITIONS_LAST: the same
                rows += len(tokens)
        assert split, "no prefill chunk split an image: the test does not test that"
        assert rows > 100, rows
    (_, a), (_, b) = probe_runs["v1"], probe_runs["v2"]
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):  # the same rows on both runners, request by request
        for rid in {base_request_id(i) for i in ra["req_ids"]}:
            ia = [base_request_id(i) for i in ra["req_ids"]].index(rid)
            ib = [base_request_id(i) for i in rb["req_ids"]].index(rid)
            for key in ("next_pos", "positions"):
                assert torch.equal(ra["inputs"][key][ia], rb["inputs"][key][ib]), (rid, key)
