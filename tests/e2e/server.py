"""An OpenAI server of vLLM in a subprocess, for end-to-end tests (shared by the server test modules)."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(text: str, name: str) -> float:
    """Sum of a Prometheus metric's samples (any labels) in a ``/metrics`` text."""
    return sum(float(v) for v in re.findall(re.escape(name) + r"(?:\{[^}]*\})? ([0-9.eE+-]+)", text))


@contextlib.contextmanager
def openai_server(model: str, draft: str | None, log_path: Path, env: dict[str, str], *, max_num_seqs: int,
                  timeout: float) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m vllm.entrypoints.openai.api_server`` with ``--spec-model draft --spec-tokens 3`` (none for
    ``draft=None``) and the
    CPU build's flags; yields ``(base URL, process)`` once ``/health`` answers, stops it afterwards."""
    port = free_port()
    spec = ["--spec-model", draft, "--spec-tokens", "3"] if draft is not None else []
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           *spec, "--host", "127.0.0.1", "--port", str(port),
           "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "512", "--dtype", "float32",
           "--max-num-seqs", str(max_num_seqs)]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
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
            yield base, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
