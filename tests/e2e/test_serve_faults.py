"""The OpenAI server keeps serving when a plugin drafter raises with 16 requests in flight (half streamed).

The faulty test plugin's forward raises (or calls ``sys.exit``) from its 6th call on. Every request must complete
(HTTP 200, full streams), with the tokens it gets without speculation, the server must stay
healthy and keep answering, and the spec-decode counters must stop growing.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.conftest import MAX_TOKENS, PROMPTS, with_pythonpath
from tests.e2e.server import metric, openai_server
from tests.e2e.test_faults import DIST, faulty_checkpoint
from vllm_spec_plugins.testing.engine import default_env

N_REQUESTS = 16


@pytest.fixture(scope="module", params=["exit"])
def server(request, tiny, faulty_plugin_path, tmp_path_factory):
    """The forward calls ``sys.exit`` (a plugin's SystemExit must not end the engine; a forward that raises
    takes the same path through the guard, tested in process by tests/e2e/test_faults.py)."""
    draft = faulty_checkpoint(tmp_path_factory.mktemp("serve-faulty") / "draft", fault=request.param, fault_at=6)
    log_path = tmp_path_factory.mktemp("serve-faults") / "server.log"
    with openai_server(str(tiny["target"]), str(draft), log_path, default_env(with_pythonpath(faulty_plugin_path)),
                       max_num_seqs=N_REQUESTS, timeout=600) as (base, proc):
        yield base, log_path, str(tiny["target"]), proc, request.param


def _body(model: str, prompt: list[int], stream: bool) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True,
            "return_token_ids": True, "stream": stream}


def _complete(base: str, model: str, prompt: list[int], stream: bool) -> tuple[int, list[int], str | None]:
    """(HTTP status, generated token ids, finish reason)."""
    r = requests.post(f"{base}/v1/completions", json=_body(model, prompt, stream), stream=stream, timeout=600)
    if r.status_code != 200:
        return r.status_code, [], None
    if not stream:
        choice = r.json()["choices"][0]
        return 200, list(choice["token_ids"]), choice["finish_reason"]
    tokens: list[int] = []
    finish = None
    for line in r.iter_lines():
        if not line or not line.startswith(b"data: "):
            continue
        data = line[len(b"data: "):]
        if data == b"[DONE]":
            break
        choice = json.loads(data)["choices"][0]
        tokens += choice.get("token_ids") or []
        finish = choice.get("finish_reason") or finish
    return 200, tokens, finish


def test_sixteen_in_flight_all_complete_when_the_drafter_raises(server, baseline):
    base, log_path, model, proc, fault = server
    jobs = [(PROMPTS[i % len(PROMPTS)], i % 2 == 1) for i in range(N_REQUESTS)]  # every other one streamed
    with ThreadPoolExecutor(N_REQUESTS) as pool:
        results = list(pool.map(lambda j: _complete(base, model, *j), jobs))
    for i, ((_, stream), (status, tokens, finish)) in enumerate(zip(jobs, results)):
        assert status == 200, (i, stream)
        assert finish == "length", (i, stream, finish)
        assert tokens == baseline.outputs[i % len(PROMPTS)], (i, stream)
    log = log_path.read_text()
    errors = [ln for ln in log.splitlines() if "Speculative decoding is now OFF" in ln]
    assert len(errors) == 1 and f"plugin 'faulty' ({DIST})" in errors[0]
    assert ("planned failure at forward call 6" if fault == "raise" else
            "SystemExit: faulty drafter: planned sys.exit at forward call 6") in log
    # still healthy; speculation stays off: the counters do not move any more
    assert requests.get(f"{base}/health", timeout=10).status_code == 200
    before = requests.get(f"{base}/metrics", timeout=10).text
    drafts = metric(before, "vllm:spec_decode_num_drafts_total")
    assert drafts > 0
    status, tokens, _ = _complete(base, model, PROMPTS[0], stream=False)
    assert status == 200 and tokens == baseline.outputs[0]
    after = requests.get(f"{base}/metrics", timeout=10).text
    assert metric(after, "vllm:spec_decode_num_drafts_total") == drafts
    assert metric(after, "vllm:spec_decode_num_draft_tokens_total") == metric(
        before, "vllm:spec_decode_num_draft_tokens_total")
    assert proc.poll() is None


def test_plain_server_starts_and_serves_with_a_plugin_that_exits_at_import(tiny, exiting_plugin_path, baseline,
                                                                            tmp_path):
    """A plugin whose import calls argparse's parse_args() (SystemExit 2 on vLLM's command line) is skipped
    and named; the plain server (no speculative config) starts and serves."""
    log_path = tmp_path / "server.log"
    with openai_server(str(tiny["target"]), None, log_path, default_env(with_pythonpath(exiting_plugin_path)),
                       max_num_seqs=4, timeout=300) as (base, _):
        status, tokens, finish = _complete(base, str(tiny["target"]), PROMPTS[0], stream=False)
        assert status == 200 and tokens == baseline.outputs[0] and finish == "length"
    log = log_path.read_text()
    assert "skipping plugin 'exitingthing'" in log and "vsp-test-exiting-plugin 0.0.2" in log and "SystemExit" in log
