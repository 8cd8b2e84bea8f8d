"""Every patch the shim installs is in the manifest (``make compat`` checks it against vLLM) and in the registry."""

from __future__ import annotations

import importlib
import re

import vllm_spec_plugins.patch as patch
from vllm_spec_plugins.patch import _util
from vllm_spec_plugins.patch.targets import TARGETS

#: The modules the shim's patches wait for (``when_imported``); importing them installs every patch.
PATCHED_MODULES = ("vllm.engine.arg_utils", "vllm.config.vllm", "vllm.config.speculative",
                   "vllm.v1.worker.gpu_model_runner", "vllm.v1.core.sched.scheduler", "vllm.v1.worker.gpu.model_runner",
                   "vllm.v1.worker.gpu.mm.encoder_runner", "vllm.v1.engine.core")


def _entries() -> list[str]:
    entries = re.split(r"\n(?=\d+\. ``)", patch.__doc__)[1:]
    entries[-1] = entries[-1].split("\n\n")[0]
    return entries


def _applied() -> set[tuple[str, str]]:
    from vllm_spec_plugins.shim import register

    for m in PATCHED_MODULES:
        importlib.import_module(m)
    register()
    return {(m, q) for m, q in _util.APPLIED if m.startswith("vllm.")}  # other tests wrap stand-in classes


def test_every_installed_patch_is_in_the_manifest_and_the_registry():
    applied = _applied()
    assert len(applied) == len(_entries()) == 25, sorted(applied)
    manifest = {(t.module, t.qualname) for t in TARGETS}
    assert not applied - manifest, f"patched but not in patch/targets.py: {sorted(applied - manifest)}"
    heads = [e.splitlines()[0] for e in _entries()]
    for module, qualname in applied:
        named = [h for h in heads if f"{qualname}``" in h or f"{module}.{qualname}``" in h]
        assert named, f"{module}.{qualname} is patched but no registry entry names it"


def test_a_patch_missing_from_the_manifest_is_caught(monkeypatch):
    """The check above fails on an unlisted wrap (here a made-up one recorded as wrap_method would)."""
    monkeypatch.setattr(_util, "APPLIED", [*_util.APPLIED, ("vllm.v1.core.sched.scheduler", "Scheduler.add_request")])
    applied = _applied()
    manifest = {(t.module, t.qualname) for t in TARGETS}
    assert applied - manifest == {("vllm.v1.core.sched.scheduler", "Scheduler.add_request")}


def test_every_registry_entry_says_why_how_when_to_remove_upstream_and_verified_by():
    for e in _entries():
        for key in ("Why", "How", "Remove when", "Upstream", "Verified by"):
            assert f"{key}:" in e, f"{e.splitlines()[0]}: no {key!r}"
