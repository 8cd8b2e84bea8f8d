"""Plugin drafters under a vision-language target, real CPU engines, both model runners.

The target is the test kit's tiny Idefics3 (:func:`vllm_spec_plugins.testing.fixtures.make_tiny_vlm`:
SmolVLM's architecture, random weights, 4 tokens per image), served with image prompts. Oracles:

* Medusa, EAGLE-1 and the MLP speculator serve it on V1 and on MRV2: greedy output equals no speculation,
  drafts are accepted, and the same drafter gives the same counts on both runners. The outputs differ
  from image to image, so an engine that ignored or mixed up the images would fail the equality;
* an EAGLE-3 draft is refused with a message naming the draft, the plugin and the target (vLLM serves
  aux hidden states only from targets implementing ``SupportsEagle3``; Idefics3 does not in 0.32);
* a test plugin reading the API-3 sources (``tests/plugins/mm_probe_drafter``) sees what the target
  consumed, row for row, through a chunked prefill that splits the image: text rows are the target's
  token embeddings, image rows the image's features (computed here with Transformers), the mask marks
  exactly the image tokens, positions are each request's own; V1 and MRV2 trace the same values;
* its attention drafter (EAGLE-1's draft taking the token-row sources) gets the target's rows in the first
  pass of vLLM's EAGLE loop, beside vLLM's own inputs for those rows, and zeros in the later passes, the same
  on both runners;
* through the OpenAI server, an image given as a ``data:`` URI, with the probe (its traced image rows are
  that image's features); and Medusa at TP=2.
"""

from __future__ import annotations

import base64

import pytest
import torch

from tests.conftest import POLICY_OFF, with_pythonpath
from tests.e2e.mm_probe import attention_probe_runs as attention_probe_runs_of
from tests.e2e.mm_probe import probe_checkpoints
from vllm_spec_plugins.runtime.trace import base_request_id, load_trace
from vllm_spec_plugins.testing.engine import run_engine
from vllm_spec_plugins.testing.fixtures import (
    VLM_IMAGE_TOKENS,
    VLM_PROMPT,
    make_test_image,
    make_tiny_eagle,
    make_tiny_eagle3,
    make_tiny_medusa,
    make_tiny_mlp_speculator,
    make_tiny_vlm,
    target_embeddings,
)

IMAGE_KINDS = ("red", "pattern", "stripes")
TEXT_PROMPT = "User:Hello there<end_of_utterance>\nAssistant:"
MAX_TOKENS = 24
MM = {"limit_mm_per_prompt": {"image": 1}}
#: Prefill chunks of 8 tokens: the prompt's image tokens (positions 7-10) fall into two chunks.
CHUNKED = {**MM, "max_num_batched_tokens": 8}
HEADS_AND_EAGLE = ("medusa", "eagle", "mlp")
#: Prompt tokens per request: an image prompt is 37 (its image 7: two markers, a global-image token, 4 image
#: tokens); the text prompt, one token per character but for the end-of-utterance token.
PROMPT_LEN = {"0": 37, "1": 37, "2": 37, "3": len(TEXT_PROMPT) - len("<end_of_utterance>") + 1}


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    d = tmp_path_factory.mktemp("vlm")
    target = make_tiny_vlm(d / "tiny-vlm")
    return {
        "target": target,
        "images": [make_test_image(d / f"{k}.png", k) for k in IMAGE_KINDS],
        "medusa": make_tiny_medusa(d / "medusa", target, num_heads=3),
        # "eagle-" / "eagle3" in the folder names: vLLM's path heuristic picks the method
        "eagle": make_tiny_eagle(d / "tiny-eagle-1", target),
        "eagle3": make_tiny_eagle3(d / "tiny-eagle3", target, draft_vocab=None),
        "mlp": make_tiny_mlp_speculator(d / "mlp", target, n_predict=3),
        **probe_checkpoints(d, target),
    }


def _run(vlm, runner, draft=None, *, llm_kwargs=MM, env=None, method=None, **kw):
    spec = None if draft is None else {"model": str(vlm[draft] if draft in vlm else draft),
                                        "num_speculative_tokens": 3, **({"method": method} if method else {})}
    return run_engine(vlm["target"], speculative_config=spec, text_prompts=[VLM_PROMPT] * 3 + [TEXT_PROMPT],
                      images=[*vlm["images"], None], max_tokens=MAX_TOKENS, llm_kwargs=llm_kwargs,
                      env={**POLICY_OFF, **(env or {})}, runner=runner, **kw)


@pytest.fixture(scope="module")
def base(vlm):
    return {runner: _run(vlm, runner) for runner in ("v1", "v2")}


def test_the_tiny_vlm_reads_its_images_on_both_runners(base):
    v1 = base["v1"].outputs
    assert len({tuple(o) for o in v1}) == 4, "each image (and the text prompt) must give its own output"
    assert base["v2"].outputs == v1
    assert "Using V2 Model Runner" in base["v2"].log


@pytest.fixture(scope="module", params=HEADS_AND_EAGLE)
def served(request, vlm):
    draft = request.param
    return draft, {runner: _run(vlm, runner, draft) for runner in ("v1", "v2")}


def test_drafters_serve_the_vlm_output_equals_no_speculation(served, base):
    draft, runs = served
    for runner, r in runs.items():
        assert r.outputs == base[runner].outputs, (draft, runner)
        assert r.metrics["accepted"] > 0, (draft, runner)
    assert "runs on Model Runner V2" in runs["v2"].log
    # the same drafter on both runners: the same drafts verified and accepted
    assert runs["v1"].metrics["drafts"] == runs["v2"].metrics["drafts"]
    assert runs["v1"].accepted_per_pos == runs["v2"].accepted_per_pos


@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_an_eagle3_draft_is_refused_naming_draft_plugin_and_target(vlm, runner):
    r = _run(vlm, runner, "eagle3", check=False)
    assert r.returncode != 0
    line = next(ln for ln in r.log.splitlines() if "PluginLoadError" in ln)
    assert f"draft '{vlm['eagle3']}' (plugin 'eagle'" in line
    assert "SupportsEagle3" in line and "Idefics3ForConditionalGeneration" in line
    assert "EAGLE-1, Medusa, the MLP speculator" in line


# -- the API-3 sources: what the target was fed -----------------------------------------------------


def _image_features(vlm) -> list[torch.Tensor]:
    """The merged embeddings of each image's tokens, as Transformers' Idefics3 computes them."""
    from PIL import Image
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration

    processor = AutoProcessor.from_pretrained(str(vlm["target"]))
    model = Idefics3ForConditionalGeneration.from_pretrained(str(vlm["target"]), torch_dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for path in vlm["images"]:
            batch = processor(text=VLM_PROMPT, images=[Image.open(path).convert("RGB")], return_tensors="pt")
            feats = model.model.get_image_features(pixel_values=batch["pixel_values"],
                                                   pixel_attention_mask=batch.get("pixel_attention_mask"))
            feats = getattr(feats, "pooler_output", feats)
            out.append(feats.reshape(-1, feats.shape[-1])[:VLM_IMAGE_TOKENS])
    return out


def _rows(records):
    """Per step: base request id -> that request's traced token rows and request row."""
    steps = []
    for rec in records:
        x, start, per = rec["inputs"], 0, {}
        for row, rid in enumerate(rec["req_ids"]):
            n = int(x["counts"][row])
            per[base_request_id(rid)] = {
                "tokens": x["tokens"][start:start + n], "embeds": x["embeds"][start:start + n],
                "is_mm": x["is_mm"][start:start + n], "pos": x["pos"][start:start + n],
                "next_pos": x["next_pos"][row], "image": rec["state"]["image"][row]}
            start += n
        steps.append(per)
    return steps


@pytest.fixture(scope="module")
def probe_runs(vlm, probe_site, tmp_path_factory):
    runs = {}
    for runner in ("v1", "v2"):
        trace = tmp_path_factory.mktemp(f"probe-{runner}")
        r = _run(vlm, runner, "probe", llm_kwargs=CHUNKED,
                 env={**with_pythonpath(probe_site), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)})
        runs[runner] = (r, _rows(load_trace(trace)))
    return runs


def test_probe_sees_what_the_target_consumed_row_for_row(vlm, probe_runs, base):
    r, steps = probe_runs["v1"]
    assert r.outputs == base["v1"].outputs  # chunked prefill and the probe's drafts change nothing
    table = target_embeddings(vlm["target"])
    feats = _image_features(vlm)
    image_token = 260
    split = False
    prefill: dict[str, list[int]] = {}
    for per in steps:
        for rid, x in per.items():
            tokens = x["tokens"].to(torch.int64)
            mm = tokens == image_token
            assert torch.equal(x["is_mm"], mm), (rid, tokens)
            assert torch.equal(x["embeds"][~mm], table[tokens[~mm]]), rid  # text rows: the target's table
            if mm.any():
                img = int(rid)  # requests 0-2 carry images 0-2; the image tokens start at position 7
                idx = x["pos"][mm] - 7
                torch.testing.assert_close(x["embeds"][mm], feats[img][idx], rtol=1e-4, atol=1e-4)
                split |= 0 < int(mm.sum()) < VLM_IMAGE_TOKENS
            pos = x["pos"]
            assert torch.equal(pos, pos[0] + torch.arange(len(pos))), rid  # consecutive, the request's own
            if int(pos[0]) < PROMPT_LEN[rid]:  # a prompt chunk
                prefill.setdefault(rid, []).extend(pos.tolist())
    assert split, "no prefill chunk split an image: the test does not test that"
    for rid, seen in prefill.items():  # every prompt position exactly once, over the chunks
        assert sorted(seen) == list(range(PROMPT_LEN[rid])), rid
    # the state-carry hook folded the merged embedding of each request's last image token (chunk 2 of 2)
    last = {rid: x for per in steps for rid, x in per.items()}  # each request's last traced step
    for img in range(3):
        torch.testing.assert_close(last[str(img)]["image"], feats[img][VLM_IMAGE_TOKENS - 1], rtol=1e-4, atol=1e-4)
    assert not last["3"]["image"].any()  # the text prompt has no image


def test_probe_sees_the_same_on_v1_and_mrv2(probe_runs):
    (r1, s1), (r2, s2) = probe_runs["v1"], probe_runs["v2"]
    assert r1.outputs == r2.outputs
    assert len(s1) == len(s2) > 0
    for a, b in zip(s1, s2, strict=True):
        assert a.keys() == b.keys()
        for rid in a:
            for key in a[rid]:
                assert torch.equal(a[rid][key], b[rid][key]), (rid, key)


@pytest.fixture(scope="module")
def attention_probe_runs(vlm, probe_site, tmp_path_factory):
    """The attention probe (EAGLE-1's draft, taking the token-row sources) through a chunked prefill."""
    return attention_probe_runs_of(lambda runner, draft, **kw: _run(vlm, runner, draft, llm_kwargs=CHUNKED, **kw),
                                   probe_site, tmp_path_factory)


def test_attention_drafter_gets_the_target_rows_in_its_first_pass(vlm, attention_probe_runs, base):
    """Pass 1 of vLLM's EAGLE loop has the target's token layout: row t of a token-row source is the target's
    row t (its embeddings, mask, position, token), beside vLLM's own inputs for that row (the token after it,
    the same position). Later passes (one row per request, drafted tokens) get zeros."""
    table = target_embeddings(vlm["target"])
    feats = _image_features(vlm)
    for runner, (r, records, calls) in attention_probe_runs.items():
        assert r.outputs == base[runner].outputs, runner
        assert r.metrics["accepted"] > 0, runner
        assert "served by plugin 'mmprobe'" in r.log, runner
        assert len(records) > 10 and len(calls) == 3 * len(records), runner
        split = checked = 0
        for i, rec in enumerate(records):
            first, later = calls[3 * i], calls[3 * i + 1:3 * i + 3]
            x = rec["inputs"]
            T = x["tokens"].shape[0]
            assert first["rows"] >= T
            for key in ("tokens", "pos", "is_mm", "embeds"):  # what the forward got is what was traced
                assert torch.equal(first[key][:T], x[key]), (runner, i, key)
            tokens = x["tokens"].to(torch.int64)
            mm = tokens == 260
            assert torch.equal(x["is_mm"], mm)
            assert torch.equal(x["embeds"][~mm], table[tokens[~mm]])
            start = 0
            for row, rid in enumerate(rec["req_ids"]):
                rid, n = base_request_id(rid), int(x["counts"][row])
                sl = slice(start, start + n)
                pos, tok, ids = x["pos"][sl], tokens[sl], first["input_ids"][sl].to(torch.int64)
                if mm[sl].any():
                    img = int(rid)
                    torch.testing.assert_close(x["embeds"][sl][mm[sl]], feats[img][pos[mm[sl]] - 7],
                                               rtol=1e-4, atol=1e-4)
                    split += int(0 < int(mm[sl].sum()) < VLM_IMAGE_TOKENS)
                # the rows vLLM keeps: a prompt chunk's all, a decode step's accepted ones
                kept = n if int(pos[0]) < PROMPT_LEN[rid] else int(rec["valid_count"][row])
                assert torch.equal(first["positions"][sl][:kept], pos[:kept]), (runner, i, rid)
                assert torch.equal(ids[:kept - 1], tok[1:kept]), (runner, i, rid)  # vLLM's: the next token
                checked += kept
                start += n
            assert start == T
            B = len(rec["req_ids"])
            for c in later:
                assert c["rows"] >= B
                for key in ("embeds", "pos", "tokens"):
                    assert not c[key].any(), (runner, i, key)
                assert not c["is_mm"].any()
        assert split, "no prefill chunk split an image: the test does not test that"
        assert checked > 150, checked
    # the same rows on both runners (MRV2 may order a step's requests differently)
    (_, r1, _), (_, r2, _) = attention_probe_runs["v1"], attention_probe_runs["v2"]
    assert len(r1) == len(r2)
    for a, b in zip(r1, r2, strict=True):
        a, b = _by_request(a), _by_request(b)
        assert a.keys() == b.keys()
        for rid in a:
            for key in a[rid]:
                assert torch.equal(a[rid][key], b[rid][key]), (rid, key)


def _by_request(rec):
    """One step's traced token rows, by base request id."""
    x, start, out = rec["inputs"], 0, {}
    for row, rid in enumerate(rec["req_ids"]):
        n = int(x["counts"][row])
        out[base_request_id(rid)] = {key: x[key][start:start + n] for key in ("tokens", "pos", "is_mm", "embeds")}
        start += n
    return out


def test_medusa_serves_the_vlm_at_tensor_parallel_2(vlm, base):
    r = _run(vlm, "v1", "medusa", tensor_parallel_size=2)
    assert r.outputs == base["v1"].outputs
    assert r.metrics["accepted"] > 0


def test_openai_server_image_as_data_uri(vlm, base, probe_site, tmp_path):
    """An OpenAI chat message with the image as a data: URI and a text part: the chat template makes it
    VLM_PROMPT, so the probe's greedy reply equals the offline engine's without speculation for that image,
    and what it traced of the image's tokens is that image's features."""
    import requests

    from tests.e2e.server import metric, openai_server
    from vllm_spec_plugins.testing.engine import default_env

    data = base64.b64encode(vlm["images"][1].read_bytes()).decode()
    trace = tmp_path / "trace"
    env = default_env({**POLICY_OFF, **with_pythonpath(probe_site), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)})
    with openai_server(str(vlm["target"]), str(vlm["probe"]), tmp_path / "server.log", env,
                       max_num_seqs=2, timeout=600) as (url, _):
        body = {"model": str(vlm["target"]), "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
                "messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
                    {"type": "text", "text": "What is this?"}]}]}
        resp = requests.post(f"{url}/v1/chat/completions", json=body, timeout=300)
        assert resp.status_code == 200, resp.text
        reply = resp.json()["choices"][0]["message"]["content"]
        assert metric(requests.get(f"{url}/metrics", timeout=30).text,
                      "vllm:spec_decode_num_accepted_tokens_total") > 0
    assert reply and reply == base["v1"].texts[1]
    assert reply != base["v1"].texts[0]  # another image, another reply: the image reached the target
    records = load_trace(trace)
    image = [(rec["inputs"]["embeds"][rec["inputs"]["is_mm"]], rec["inputs"]["pos"][rec["inputs"]["is_mm"]])
             for rec in records if rec["inputs"]["is_mm"].any()]
    assert image, "the probe traced no image rows"
    embeds, pos = torch.cat([e for e, _ in image]), torch.cat([p for _, p in image])
    assert sorted(pos.tolist()) == list(range(7, 7 + VLM_IMAGE_TOKENS))  # each image token once
    torch.testing.assert_close(embeds, _image_features(vlm)[1][pos - 7], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def probe_site(mm_probe_site):
    return mm_probe_site


def _check(draft, target, site, *argv):
    import sys

    from vllm_spec_plugins.testing import forkserver
    from vllm_spec_plugins.testing.engine import default_env

    return forkserver.run_module(sys.executable, "vllm_spec_plugins.cli",
                                 ["check", str(draft), "--target", str(target), *argv],
                                 default_env(with_pythonpath(site)), 600)


def test_check_agrees_with_the_engine_on_the_multimodal_sources(vlm, tiny, probe_site):
    rc, out = _check(vlm["probe"], vlm["target"], probe_site)
    assert rc == 0 and "result: PASS" in out, out
    assert "embeds <- target_inputs_embeds [128] model" in out
    # the engine refuses the probe on a text target (bad-inputs row 72): so does check
    rc, out = _check(vlm["probe"], tiny["target"], probe_site)
    assert rc != 0 and "result: FAIL" in out, out
    assert "reads target_inputs_embeds" in out and "is text-only" in out
    bad = run_engine(tiny["target"], speculative_config={"model": str(vlm["probe"]), "num_speculative_tokens": 3},
                     prompts=[[1, 50, 60]], max_tokens=4, env=with_pythonpath(probe_site), check=False)
    assert bad.returncode != 0 and "is text-only" in bad.log
    # the attention probe: the token-row sources bind; its EAGLE layout needs the plugin named
    rc, out = _check(vlm["attn_probe"], vlm["target"], probe_site, "--method", "mmprobe")
    assert rc == 0 and "result: PASS" in out, out
    assert "embeds <- target_inputs_embeds [128] model" in out and "forward reads target_inputs_embeds" in out
    rc, out = _check(vlm["attn_probe"], vlm["target"], probe_site)
    assert rc != 0 and "pass --speculative-config '{\"method\": \"mmprobe\"" in out, out  # the claiming plugin
    # an EAGLE draft that does not take the image's embeddings: said, not refused
    rc, out = _check(vlm["eagle"], vlm["target"], probe_site)
    assert rc == 0 and "does not set supports_multimodal_embeddings" in out, out
    # EAGLE-3 on a target without SupportsEagle3: the engine refuses it (row 74), so does check
    rc, out = _check(vlm["eagle3"], vlm["target"], probe_site)
    assert rc != 0 and "SupportsEagle3" in out and f"draft '{vlm['eagle3']}' (plugin 'eagle'" in out, out
