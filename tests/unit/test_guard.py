"""The fault guard of plugin drafters (runtime/guard.py): degrade once, log once, check ids on the device."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch

from vllm_spec_plugins.runtime.guard import DraftGuard

from .fakes import attach, heads


def _guard(async_scheduling=False, vocab=10):
    d = replace(heads("FaultyArch"), plugin="faulty", dist_label="vsp-faulty 0.0.7")
    return DraftGuard(d, model_class="pkg.model:Faulty", checkpoint="/ckpt/faulty", vocab_size=vocab,
                      device=torch.device("cpu"), async_scheduling=async_scheduling)


def test_failure_logs_once_and_disables(caplog, monkeypatch):
    monkeypatch.delenv("VLLM_SPEC_PLUGINS_STRICT", raising=False)
    g = _guard()

    def boom():
        raise RuntimeError("kaput")

    with attach(caplog.handler, "vllm.spec_plugins"):
        ok, out = g.run("pkg.model:Faulty.forward()", boom)
        ok2, _ = g.run("pkg.model:Faulty.forward()", boom)
    assert (ok, out, ok2) == (False, None, False)
    assert g.disabled
    errors = list({id(r): r for r in caplog.records if r.levelno == logging.ERROR}.values())  # handler seen twice
    assert len(errors) == 1
    msg = errors[0].getMessage()
    for part in ("plugin 'faulty' (vsp-faulty 0.0.7)", "model class pkg.model:Faulty", "draft '/ckpt/faulty'",
                 "forward() raised RuntimeError: kaput", "Speculative decoding is now OFF",
                 "Traceback (most recent call last)", "VLLM_SPEC_PLUGINS_STRICT=1"):
        assert part in msg, part


def test_strict_mode_reraises(monkeypatch):
    monkeypatch.setenv("VLLM_SPEC_PLUGINS_STRICT", "1")
    g = _guard()
    with pytest.raises(RuntimeError, match="kaput"):
        g.run("x", lambda: (_ for _ in ()).throw(RuntimeError("kaput")))


def test_success_passes_through():
    assert _guard().run("x", lambda a, b=0: a + b, 1, b=2) == (True, 3)


def test_sanitize_replaces_out_of_range_and_flags_next_step(caplog, monkeypatch):
    monkeypatch.delenv("VLLM_SPEC_PLUGINS_STRICT", raising=False)
    g = _guard(vocab=10)
    ok = g.sanitize(torch.tensor([[1, 2], [3, 9]]))
    assert torch.equal(ok, torch.tensor([[1, 2], [3, 9]]))
    g.poll()
    assert not g.disabled
    bad = g.sanitize(torch.tensor([[1, 10], [-1, 4]]))
    assert torch.equal(bad, torch.tensor([[1, 0], [0, 4]]))  # valid ids reach the target this step
    assert not g.disabled  # nothing synchronised: known only when the next step polls
    with attach(caplog.handler, "vllm.spec_plugins"):
        g.poll()
    assert g.disabled and "outside the target's vocabulary [0, 10)" in g.reason
    assert len({id(r) for r in caplog.records if r.levelno == logging.ERROR}) == 1


def test_idle_drafts_sync_vs_async():
    nxt = torch.tensor([5, 6, 7], dtype=torch.int32)
    assert _guard(async_scheduling=False).idle(3, 2, nxt).shape == (3, 0)  # no drafts scheduled again
    a = _guard(async_scheduling=True).idle(3, 2, nxt)  # the scheduler reserved k slots: valid ids fill them
    assert a.dtype == torch.int64 and torch.equal(a, torch.tensor([[5, 5], [6, 6], [7, 7]]))
    assert _guard(async_scheduling=True).idle(3, 0, nxt).shape == (3, 0)
