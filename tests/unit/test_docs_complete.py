"""The docs keep up with the code: every Source, hook, environment variable and CLI command is documented, and
every distribution the docs name exists (or is a worked example the docs write out)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from vllm_spec_plugins import Source, hookspecs, shim
from vllm_spec_plugins.cli import build_parser

ROOT = Path(__file__).resolve().parents[1].parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
#: Distributions the docs write out as worked examples (docs/writing-plugins.md, the `new` command's default).
EXAMPLES = {"vllm-spec-echo": "docs/writing-plugins.md", "vllm-spec-mydraft": "vllm-spec-plugins new mydraft"}


def _text() -> str:
    return "\n".join(p.read_text() for p in DOCS)


def _hooks_doc() -> str:
    return (ROOT / "docs" / "hooks.md").read_text()


def undocumented(text: str) -> list[str]:
    missing = [f"Source.{s.name} ({s.value!r})" for s in Source if f"`{s.value}`" not in text and s.name not in text]
    missing += [f"hook {h}" for h in dir(hookspecs) if h.startswith("vllm_spec_") and h not in text]
    missing += [f"environment variable {v}" for v in shim.ENV_NAMES if v not in text]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing += [f"command `vllm-spec-plugins {c}`" for c in sub.choices if f"vllm-spec-plugins {c}" not in text]
    return missing


def unknown_distributions(text: str) -> list[str]:
    real = {"vllm-spec-plugins"}
    for p in (ROOT / "plugins").glob("*/pyproject.toml"):
        real.add(re.search(r'^name = "([^"]+)"', p.read_text(), re.M).group(1))
    named = set(re.findall(r"\bvllm-spec-[a-z0-9][a-z0-9_-]*[a-z0-9]\b", text))
    return sorted(named - real - set(EXAMPLES))


def test_every_source_hook_variable_and_command_is_documented():
    assert undocumented(_hooks_doc() + _text()) == []


def test_every_distribution_the_docs_name_exists():
    assert unknown_distributions(_text()) == []


def test_the_checks_fail_on_a_gap():
    text = _hooks_doc() + _text()
    assert "environment variable VLLM_SPEC_PLUGINS_STRICT" in undocumented(text.replace("VLLM_SPEC_PLUGINS_STRICT", "X"))
    assert "command `vllm-spec-plugins doctor`" in undocumented(text.replace("vllm-spec-plugins doctor", "x"))
    assert unknown_distributions(text + " pip install vllm-spec-hydra ") == ["vllm-spec-hydra"]
