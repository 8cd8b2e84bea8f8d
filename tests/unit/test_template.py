"""``vllm-spec-plugins new NAME``: the files it writes, and that the plugin they make registers.

Installing it, ``list``, ``check`` and its own tests (conformance suite on real engines): tests/e2e/test_template.py.
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from tests.unit.fakes import FakeEntryPoint, host_with
from vllm_spec_plugins.cli import main
from vllm_spec_plugins.template import names, write_plugin


def test_names():
    assert names("my_draft") == {"name": "my_draft", "pkg": "vllm_spec_my_draft", "dist": "vllm-spec-my-draft",
                                 "camel": "MyDraft", "model_type": "my_draft_drafter"}
    for bad in ("", "My", "1x", "a-b", "class", "x y"):
        with pytest.raises(ValueError, match="use lowercase letters"):
            names(bad)


def test_new_writes_a_distribution_that_registers(tmp_path, monkeypatch, capsys):
    assert main(["new", "unit_tmpl", "--dir", str(tmp_path)]) == 0
    root = tmp_path / "vllm-spec-unit-tmpl"
    assert f"wrote {root}" in capsys.readouterr().out
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/vllm_spec_unit_tmpl/__init__.py",
                     "src/vllm_spec_unit_tmpl/checkpoint.py", "src/vllm_spec_unit_tmpl/config.py",
                     "src/vllm_spec_unit_tmpl/model.py", "tests/test_unit_tmpl.py"]
    py = (root / "pyproject.toml").read_text()
    assert 'name = "vllm-spec-unit-tmpl"' in py and 'unit_tmpl = "vllm_spec_unit_tmpl"' in py
    for f in files:
        if f.endswith(".py"):
            compile((root / f).read_text(), f, "exec")  # every generated module is valid Python
    monkeypatch.syspath_prepend(str(root / "src"))
    try:
        mod = importlib.import_module("vllm_spec_unit_tmpl")
        host = host_with(FakeEntryPoint("unit_tmpl", mod, dist="vllm-spec-unit-tmpl", version="0.1.0"))
        (d,) = host.plugins["unit_tmpl"].drafters
        assert d.architectures == ("UnitTmplDrafter",) and d.model_type == "unit_tmpl_drafter"
        assert host.select(["UnitTmplDrafter"]) is d
        cfg = importlib.import_module("vllm_spec_unit_tmpl.config").UnitTmplConfig(hidden_size=8)
        assert cfg.model_type == "unit_tmpl_drafter" and cfg.num_heads == 3
        target = tmp_path / "target"
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"hidden_size": 8, "vocab_size": 11}))
        ck = importlib.import_module("vllm_spec_unit_tmpl.checkpoint").make_checkpoint(tmp_path / "draft", target)
        assert json.loads((ck / "config.json").read_text())["architectures"] == ["UnitTmplDrafter"]
    finally:
        for m in [m for m in sys.modules if m.startswith("vllm_spec_unit_tmpl")]:
            del sys.modules[m]


def test_new_refuses_existing_folder_and_bad_names(tmp_path, capsys):
    write_plugin("twice", tmp_path)
    assert main(["new", "twice", "--dir", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["new", "Bad-Name", "--dir", str(tmp_path)]) == 2
    assert "use lowercase letters" in capsys.readouterr().err


def test_the_e2e_marker_is_known_outside_the_template_folder(tmp_path):
    """The test kit registers its marker (pytest11 entry point): a suite run from any folder gets no
    'Unknown pytest.mark.e2e' warning (here: an error)."""
    import subprocess
    import sys

    (tmp_path / "test_m.py").write_text("import pytest\n\n\n@pytest.mark.e2e\ndef test_x():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                          "error::pytest.PytestUnknownMarkWarning", "test_m.py"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout[-2000:]


def test_template_declares_the_current_api_and_the_documented_pin():
    from vllm_spec_plugins._names import API_VERSION
    from vllm_spec_plugins.template import _FILES

    init = next(v for k, v in _FILES.items() if k.endswith("__init__.py"))
    assert f"VLLM_SPEC_API = {API_VERSION}" in init
    assert '"vllm-spec-plugins>=0.1,<0.2"' in _FILES["pyproject.toml"] and 'readme = "README.md"' in _FILES["pyproject.toml"]
    assert "https://" not in _FILES["README.md"]  # no address that does not exist
