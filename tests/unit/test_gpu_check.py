"""``tools/gpu_check.py`` (the GPU checks of prompt lookup and the kept first-pass rows) in its CPU mode: it runs,
and it fails where the code it checks is wrong."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_passes_on_the_cpu(capsys):
    assert _tool().main(["--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS ") == 4 and "FAIL" not in out


def test_a_wrong_lookup_fails_it(capsys, monkeypatch):
    from vllm_spec_plugins.runtime import lookup

    right = lookup.lookup_drafts

    def off_by_one(ctx, n, k, min_n, max_n):
        drafts, found = right(ctx, n, k, min_n, max_n)
        return torch.where(found.unsqueeze(1), drafts + 1, drafts), found

    monkeypatch.setattr(lookup, "lookup_drafts", off_by_one)
    assert _tool().main(["--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "FAIL lookup search" in out and "FAIL lookup steps" in out and "PASS kept first-pass rows" in out


def test_a_guard_that_lets_bad_ids_through_fails_it(capsys, monkeypatch):
    from vllm_spec_plugins.runtime.guard import DraftGuard

    monkeypatch.setattr(DraftGuard, "sanitize", lambda self, drafts: drafts)
    assert _tool().main(["--device", "cpu"]) == 1
    assert "FAIL draft guard" in capsys.readouterr().out
