"""README.md's quickstart, run as written: the fenced blocks after ``<!-- quickstart-test -->``, in order,
as one bash script from the repository root (so the README cannot drift from what works).

Only the port is substituted, and only when 8000 is taken (other servers may run on this machine).
The GPU block cannot run here; its ``vllm serve`` flags are parsed with vLLM's own argument parser.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.e2e.server import free_port, metric
from vllm_spec_plugins.testing.engine import default_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MARK = "<!-- quickstart-test -->"


def quickstart_blocks(text: str = README) -> list[str]:
    return re.findall(re.escape(MARK) + r"\s*```bash\n(.*?)```", text, flags=re.S)


def gpu_block(text: str = README) -> str:
    section = text.split("### On a GPU install", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _json_objects(text: str) -> list[dict]:
    """The JSON answers curl printed (no newline after them), in order."""
    dec, out, i = json.JSONDecoder(), [], 0
    while (i := text.find('{"id"', i)) >= 0:
        obj, end = dec.raw_decode(text, i)
        out.append(obj)
        i = end
    return out


def test_readme_has_the_quickstart_blocks():
    blocks = quickstart_blocks()
    assert len(blocks) == 2, "README.md: expected two <!-- quickstart-test --> bash blocks (start, then ask)"
    assert "api_server" in blocks[0] and "curl" in blocks[1]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    script = "\n".join(quickstart_blocks())
    if not _port_free(8000):
        port = free_port()
        script = script.replace("localhost:8000", f"localhost:{port}").replace("--port 8000", f"--port {port}")
    # Its own session: if the script fails half-way, the server it started in the background goes down with it.
    proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=ROOT, env=default_env({"PYTHONPATH": None}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    log_path = ROOT / ".cache" / "server.log"
    log = log_path.read_text() if log_path.is_file() else ""
    return proc.returncode, out, log


def test_quickstart_serves_with_our_eagle_and_reports_metrics(quickstart):
    rc, out, log = quickstart
    assert rc == 0, f"script failed (rc={rc}):\n{out[-4000:]}\nserver log:\n{log[-4000:]}"
    # The INFO line the README shows, printed by its grep.
    assert ("vllm_spec_plugins: draft 'bench/drafts/smollm2-eagle' served by plugin 'eagle' (vllm-spec-eagle 0.1.0)"
            in out), out[-4000:]
    completion, chat = _json_objects(out)
    assert completion["model"] == chat["model"] == "smollm2"
    assert "Paris" in completion["choices"][0]["text"], completion
    assert "Paris" in chat["choices"][0]["message"]["content"], chat
    assert metric(out, "vllm:spec_decode_num_drafts_total") > 0
    # the adaptive drafting policy (on by default) verifies 1 or 2 draft tokens per drafting request and step
    drafts = metric(out, "vllm:spec_decode_num_drafts_total")
    assert drafts <= metric(out, "vllm:spec_decode_num_draft_tokens_total") <= 2 * drafts
    assert metric(out, "vllm:spec_decode_num_accepted_tokens_total") > 0
    # The CPU runtime the README preloads reached the server: vLLM's warning about it is gone.
    assert "Speculative decoding on CPU without Intel OpenMP" not in log and "libiomp is not found" not in log


def test_gpu_quickstart_flags_parse_with_vllms_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    lines = gpu_block().replace("\\\n", " ").splitlines()
    serve = [shlex.split(ln) for ln in lines if ln.startswith("vllm serve ")]
    assert len(serve) == 1
    _, _, model, *flags = serve[0]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", model, *flags])
    assert args.served_model_name == ["smollm2"] and args.port == 8000
    cpu = shlex.split(quickstart_blocks()[0].replace("\\\n", " ").split("api_server", 1)[1].split(">", 1)[0])
    cpu_args = make_arg_parser(FlexibleArgumentParser()).parse_args(cpu)
    assert args.speculative_config == cpu_args.speculative_config == {
        "method": "eagle", "model": "bench/drafts/smollm2-eagle", "num_speculative_tokens": 2}
