"""The plugin template end to end: `new` writes it, pip installs it, `list` shows it, `check` passes,
and its own tests pass: the in-process harness test and the conformance suite on real engines
(greedy output with its drafts equals the output without speculation, drafts accepted, drafts equal
its plain-torch reference, preemption and aborts)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import with_pythonpath
from vllm_spec_plugins.cli import main
from vllm_spec_plugins.testing.engine import default_env

CLI = str(Path(sys.executable).parent / "vllm-spec-plugins")


def test_template_installs_lists_checks_and_passes_its_conformance_suite(tmp_path, tiny):
    assert main(["new", "tmpl", "--dir", str(tmp_path)]) == 0
    dist = tmp_path / "vllm-spec-tmpl"
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), str(dist)], check=True)
    env = default_env(with_pythonpath(str(site)))

    out = subprocess.run([CLI, "list", "--json"], capture_output=True, text=True, check=True, env=env)
    plugin = {p["name"]: p for p in json.loads(out.stdout)}["tmpl"]
    assert (plugin["distribution"], plugin["version"], plugin["error"]) == ("vllm-spec-tmpl", "0.1.0", None)
    assert plugin["drafters"][0]["architectures"] == ["TmplDrafter"]

    draft = tmp_path / "draft"
    subprocess.run([sys.executable, "-c", "import sys; from vllm_spec_tmpl.checkpoint import make_checkpoint; "
                    "make_checkpoint(sys.argv[1], sys.argv[2])", str(draft), str(tiny["target"])],
                   check=True, env=env)
    out = subprocess.run([CLI, "check", str(draft), "--target", str(tiny["target"]), "--json"],
                         capture_output=True, text=True, env=env)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["ok"], out.stdout + out.stderr[-3000:]
    assert report["served_by"]["plugin"] == "tmpl"
    assert {i["check"]: i["status"] for i in report["items"]}["weights"] == "ok"

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
                           capture_output=True, text=True, env=env, cwd=dist)
    summary = tests.stdout.strip().splitlines()[-1]
    assert tests.returncode == 0, tests.stdout[-6000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed == 11 and "failed" not in summary, summary  # harness test + 5 conformance tests on each runner
