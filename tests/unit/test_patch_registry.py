"""Every patch the shim installs is in the manifest (``make compat`` checks it against vLLM) and in the registry, and
the two agree on which patches each supported vLLM gets (``Target.patch`` / ``Target.versions`` against each
entry's "Supported vLLM")."""

from __future__ import annotations

import importlib
import re
import types

import pytest

import vllm_spec_plugins._compat as compat
import vllm_spec_plugins.patch as patch
from vllm_spec_plugins.patch import _util, model_runner, model_runner_v2, scheduler
from vllm_spec_plugins.patch import config as config_patch
from vllm_spec_plugins.patch.targets import SUPPORTED, TARGETS

#: The modules the shim's patches wait for (``when_imported``); importing them installs every patch.
PATCHED_MODULES = ("vllm.engine.arg_utils", "vllm.config.vllm", "vllm.config.speculative",
                   "vllm.v1.worker.gpu_model_runner", "vllm.v1.core.sched.scheduler", "vllm.v1.worker.gpu.model_runner",
                   "vllm.v1.worker.gpu.mm.encoder_runner", "vllm.v1.engine.core")
#: Modules a vLLM minor no longer has: their ``when_imported`` callbacks never run there.
GONE = {"0.34": frozenset({"vllm.v1.worker.gpu_model_runner"})}  # 0.34 removed the V1 model runner
#: The patch modules the shim installs (shim._register), each with the ``when_imported`` it calls.
PATCH_MODULES = (config_patch, model_runner, model_runner_v2, scheduler)


def _entries() -> list[str]:
    entries = re.split(r"\n(?=\d+\. ``)", patch.__doc__)[1:]
    entries[-1] = entries[-1].split("\n\n")[0]
    return entries


def _number(entry: str) -> int:
    return int(entry.split(".", 1)[0])


def registry_versions() -> dict[int, tuple[str, ...]]:
    """Each registry entry's "Supported vLLM:" list: the versions it is applied on."""
    out = {}
    for e in _entries():
        m = re.search(r"Supported vLLM:\s*(\d+\.\d+(?:\s*,\s*\d+\.\d+)*)", e)
        assert m, f"{e.splitlines()[0]}: no 'Supported vLLM: X.Y, ...' list"
        out[_number(e)] = tuple(re.split(r"\s*,\s*", m.group(1)))
    return out


def registry_patches(minor: str) -> set[int]:
    return {n for n, versions in registry_versions().items() if minor in versions}


def manifest_patches(minor: str) -> set[int]:
    return {t.patch for t in TARGETS if t.patch is not None and minor in t.versions}


def manifest_patched(minor: str) -> set[tuple[str, str]]:
    return {(t.module, t.qualname) for t in TARGETS if t.patch is not None and minor in t.versions}


def _installed_minor() -> str:
    version, minor = compat.vllm_version()
    assert minor is not None, f"cannot read the installed vLLM's version ({version})"
    return f"{minor[0]}.{minor[1]}"


def _applied() -> set[tuple[str, str]]:
    from vllm_spec_plugins.shim import register

    gone = GONE.get(_installed_minor(), frozenset())
    for m in PATCHED_MODULES:
        if m not in gone:
            importlib.import_module(m)
    register()
    return {(m, q) for m, q in _util.APPLIED if m.startswith("vllm.")}  # other tests wrap stand-in classes


def test_every_installed_patch_is_in_the_manifest_and_the_registry():
    applied = _applied()
    minor = _installed_minor()
    assert len(_entries()) == 25
    if minor == "0.32":
        assert len(applied) == 25, sorted(applied)
    manifest = {(t.module, t.qualname) for t in TARGETS}
    assert not applied - manifest, f"patched but not in patch/targets.py: {sorted(applied - manifest)}"
    assert applied == manifest_patched(minor), f"patched on {minor}, but the manifest says otherwise"
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


def test_the_registry_numbers_its_entries_and_names_each_manifest_patch():
    entries = {_number(e): e.splitlines()[0] for e in _entries()}
    assert sorted(entries) == list(range(1, 26))
    for t in TARGETS:
        if t.patch is not None:
            head = entries[t.patch]
            assert f"{t.qualname}``" in head or f"{t.module}.{t.qualname}``" in head, (
                f"{t.module}.{t.qualname} has patch={t.patch}, but entry {t.patch} is {head!r}")


@pytest.mark.parametrize("minor", SUPPORTED)
def test_manifest_and_registry_agree_on_the_patches_of_each_version(minor):
    """For each supported vLLM (0.34 included), the patches the manifest applies are the ones the registry says."""
    from_manifest, from_registry = manifest_patches(minor), registry_patches(minor)
    assert from_manifest == from_registry, (
        f"vLLM {minor}: only in the manifest {sorted(from_manifest - from_registry)}, "
        f"only in the registry {sorted(from_registry - from_manifest)}")
    for n, versions in registry_versions().items():
        assert set(versions) <= set(SUPPORTED), f"entry {n}: unknown version in {versions}"
        if "0.34" not in versions:
            entry = next(e for e in _entries() if _number(e) == n)
            assert "Not applied on 0.34:" in entry, f"entry {n}: say what replaces it on 0.34"


def test_the_0_34_registry_keeps_12_patches():
    assert registry_patches("0.34") == {1, 8, 9, 10, 11, 12, 15, 17, 19, 21, 22, 23}
    assert registry_patches("0.32") == registry_patches("0.33") == set(range(1, 26))


def _stand_in(module: str) -> types.ModuleType:
    """A module with the classes and functions the manifest names in ``module`` (stubs), for a patch to wrap."""
    mod = types.ModuleType(module)
    classes: dict[str, dict[str, object]] = {}
    for t in TARGETS:
        if t.module != module:
            continue
        owner, _, member = t.qualname.rpartition(".")
        if owner:
            classes.setdefault(owner, {})[member] = lambda *a, **k: None
        elif t.kind == "class":
            classes.setdefault(member, {})
        else:
            setattr(mod, member, lambda *a, **k: None)
    for name, members in classes.items():
        setattr(mod, name, type(name, (), {**members, "__module__": module, "__qualname__": name}))
    return mod


@pytest.mark.parametrize("minor", SUPPORTED)
def test_the_patch_code_applies_what_the_manifest_says(minor, monkeypatch):
    """Run the shim's patch installers as on ``minor`` (its version read by ``has_speculator_registry``; modules the
    version lacks never imported) against stand-in modules built from the manifest: they wrap exactly the targets
    the manifest gives a patch number for that version."""
    major_, minor_ = (int(x) for x in minor.split("."))
    monkeypatch.setattr(compat, "vllm_version", lambda: (f"{minor}.0", (major_, minor_)))
    monkeypatch.setattr(_util, "APPLIED", [])
    waiting: list[tuple[str, object]] = []
    for mod in PATCH_MODULES:
        monkeypatch.setattr(mod, "when_imported", lambda name, callback: waiting.append((name, callback)))
    config_patch.apply(None, supported=True)  # type: ignore[arg-type]  # the host is read only when a config is built
    for mod in PATCH_MODULES[1:]:
        mod.apply_when_imported()
    gone = GONE.get(minor, frozenset())
    for name, callback in waiting:
        if name not in gone:
            callback(_stand_in(name))  # type: ignore[operator]
    applied = set(_util.APPLIED)
    expected = {key for key in manifest_patched(minor) if key[0] not in gone}
    assert applied == expected, (f"vLLM {minor}: the code patches but the manifest does not list "
                                 f"{sorted(applied - expected)}; the manifest lists but the code does not patch "
                                 f"{sorted(expected - applied)}")
