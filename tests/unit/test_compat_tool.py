"""Fast, offline tests for tools/compat.py and the patch-target manifest.

A tiny fake vLLM wheel (a zip) is built in tmp_path; nothing is downloaded and
vLLM is never imported.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPAT_PATH = REPO / "tools" / "compat.py"
TARGETS_PATH = REPO / "vllm_spec_plugins" / "patch" / "targets.py"


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses resolve string annotations via sys.modules
    spec.loader.exec_module(mod)
    return mod


compat = _load("_compat_tool_under_test", COMPAT_PATH)


ARG_UTILS = '''
from __future__ import annotations
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from vllm.config import ModelConfig

SOME_CONSTANT = 3
Alias = int


class Base:
    def inherited(self, x):
        return x


class EngineArgs(Base):
    flag: bool = False

    def __init__(self, model, *, seed=0):
        self.model = model
        self.tokenizer: str | None = None

    def create_speculative_config(self, target_model_config, target_parallel_config):
        return None

    async def async_method(self, a, /, b, *args, c, **kwargs):
        return None

    @overload
    def over(self, a: int) -> int: ...
    @overload
    def over(self, a: str) -> str: ...
    def over(self, value):
        return value


class Speculator:
    def __init__(self, device):
        self.device = device

    def set_attn(self, model_state, kv_cache_config):
        self.model_state = model_state
        self.device = None


def top_level(first, second=2):
    return first


try:
    import fancy_dep  # noqa: F401
    def maybe(x):
        return x
except ImportError:
    def maybe(x, y):
        return x
'''

VERSION_PY = "__version__ = version = '0.33.1'\n__version_tuple__ = version_tuple = (0, 33, 1)\n"


@pytest.fixture()
def fake_wheel(tmp_path: Path) -> Path:
    path = tmp_path / "vllm-0.33.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm/__init__.py", "raise RuntimeError('must never be imported')\n")
        z.writestr("vllm/_version.py", VERSION_PY)
        z.writestr("vllm/engine/__init__.py", "")
        z.writestr("vllm/engine/arg_utils.py", ARG_UTILS)
        z.writestr("vllm/plugins/__init__.py", "def load_general_plugins():\n    pass\n")
        z.writestr("vllm/broken.py", "def oops(:\n")
        z.writestr("vllm-0.33.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.1\n")
    return path


def T(qualname, params=(), kind="function", module="vllm.engine.arg_utils", versions=("0.32", "0.33"), why="test",
      patch=None):
    manifest = _load("_vllm_spec_plugins_patch_targets", TARGETS_PATH)
    return manifest.Target(module, qualname, params=tuple(params), kind=kind, versions=versions, why=why, patch=patch)


def _one(target, source, minor="0.33"):
    return compat.check_target(target, source, minor)


# ----------------------------------------------------------------- detection


def test_ok_method_with_matching_prefix(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("EngineArgs.create_speculative_config", ("self", "target_model_config")), src)
    assert row.status == compat.OK
    assert row.found == "(self, target_model_config, target_parallel_config)"
    full = ("self", "target_model_config", "target_parallel_config")
    assert _one(T("EngineArgs.create_speculative_config", full), src).status == compat.OK


def test_signature_mismatch_renamed_param(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("EngineArgs.create_speculative_config", ("self", "model_config")), src)
    assert row.status == compat.SIGNATURE
    assert "model_config" in row.note and "target_model_config" in row.note


def test_signature_mismatch_expected_longer_than_real(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    params = ("self", "target_model_config", "target_parallel_config", "extra")
    row = _one(T("EngineArgs.create_speculative_config", params), src)
    assert row.status == compat.SIGNATURE
    assert "<none>" in row.note


def test_missing_method_module_and_class(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    assert _one(T("EngineArgs.nope"), src).status == compat.MISSING
    row = _one(T("Nope.method"), src)
    assert row.status == compat.MISSING and "Nope" in row.note
    row = _one(T("Thing", kind="class", module="vllm.no.such.module"), src)
    assert row.status == compat.MISSING and "module not found" in row.note


def test_inherited_method_is_reported_not_followed(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("EngineArgs.inherited", ("self", "x")), src)
    assert row.status == compat.MISSING
    assert "bases: Base" in row.note and "defined on Base" in row.note
    assert _one(T("Base.inherited", ("self", "x")), src).status == compat.OK


def test_keyword_only_async_and_posonly_params(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("EngineArgs.__init__", ("self", "model", "seed")), src)
    assert row.status == compat.OK and row.found == "(self, model, *, seed)"
    row = _one(T("EngineArgs.async_method", ("self", "a", "b", "c")), src)
    assert row.status == compat.OK
    assert row.found == "(self, a, /, b, *args, c, **kwargs)"


def test_overloads_are_skipped_for_the_implementation(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    assert _one(T("EngineArgs.over", ("self", "value")), src).status == compat.OK


def test_module_level_function_and_conditional_defs(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    assert _one(T("top_level", ("first", "second")), src).status == compat.OK
    # last binding wins (the ImportError fallback here)
    assert _one(T("maybe", ("x", "y")), src).status == compat.OK
    row = _one(T("load_general_plugins", module="vllm.plugins"), src)
    assert row.status == compat.OK and row.found == "()"


def test_class_and_attribute_kinds(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    assert _one(T("EngineArgs", kind="class"), src).status == compat.OK
    assert _one(T("SOME_CONSTANT", kind="attribute"), src).status == compat.OK
    assert _one(T("ModelConfig", kind="attribute"), src).status == compat.OK  # import under TYPE_CHECKING
    assert _one(T("EngineArgs.flag", kind="attribute"), src).status == compat.OK  # class body
    assert _one(T("EngineArgs.model", kind="attribute"), src).status == compat.OK  # self.model in __init__
    assert _one(T("EngineArgs.tokenizer", kind="attribute"), src).status == compat.OK  # annotated self.X
    assert _one(T("EngineArgs.nothing", kind="attribute"), src).status == compat.MISSING
    # bound, but not as the kind the manifest claims
    row = _one(T("Alias", kind="class"), src)
    assert row.status == compat.MISSING and "not as a class" in row.note
    assert _one(T("EngineArgs", kind="function"), src).status == compat.MISSING


def test_versions_not_applicable(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    gone = T("EngineArgs.removed_in_033", versions=("0.32",))
    assert _one(gone, src).status == compat.SKIP
    still_there = T("EngineArgs.create_speculative_config", versions=("0.32",))
    row = _one(still_there, src)
    assert row.status == compat.INFO and "still present" in row.note
    assert compat.INFO not in compat.FAILING and compat.SKIP not in compat.FAILING


def test_attribute_assigned_outside_the_constructor(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("Speculator.model_state", kind="attribute"), src)  # only set_attn assigns it
    assert row.status == compat.OK
    row = _one(T("Speculator.device", kind="attribute"), src)  # __init__ wins over set_attn
    in_init = ARG_UTILS.splitlines().index("        self.device = device") + 1
    assert row.status == compat.OK and row.note == f"line {in_init}"
    assert _one(T("Speculator.kv_cache_config", kind="attribute"), src).status == compat.MISSING


def test_another_signature_of_the_same_symbol_is_skip_not_info(fake_wheel):
    """A function whose parameters changed has one target per signature; the one for other versions is SKIP."""
    src = compat.WheelSource(fake_wheel)
    old = T("EngineArgs.create_speculative_config", ("self", "target_model_config"), versions=("0.32",))
    new = T("EngineArgs.create_speculative_config", ("self", "target_model_config", "target_parallel_config"),
            versions=("0.33", "0.34"))
    rows = compat.check([old, new], src, "0.33")
    assert [r.status for r in rows] == [compat.SKIP, compat.OK]
    assert "another entry" in rows[0].note
    rows = compat.check([old], src, "0.33")  # alone, it is still reported as present
    assert rows[0].status == compat.INFO


def test_patches_applied_per_version():
    targets = [T("a", patch=1, versions=("0.32", "0.33", "0.34")), T("b", patch=2, versions=("0.32", "0.33")),
               T("c", patch=2, versions=("0.32", "0.33")), T("d", versions=("0.34",)),
               T("e", patch=4, versions=("0.34",)), T("f", patch=5, versions=("0.34",))]
    assert compat.applied_patches(targets, "0.32") == [1, 2]
    assert compat.applied_patches(targets, "0.34") == [1, 4, 5]
    assert compat.applied_patches(targets, "0.35") == []
    assert compat.format_numbers([1, 4, 5]) == "1, 4-5"
    assert compat.format_numbers([25, 1, 2, 3, 8, 10, 11, 12]) == "1-3, 8, 10-12, 25"
    assert compat.format_numbers([]) == ""


def test_unparsable_module_is_an_error(fake_wheel):
    src = compat.WheelSource(fake_wheel)
    row = _one(T("oops", module="vllm.broken"), src)
    assert row.status == compat.ERROR and "cannot parse" in row.note


# --------------------------------------------------------------- sources / cli


def test_wheel_version_and_minor(fake_wheel, tmp_path):
    assert compat.WheelSource(fake_wheel).version() == "0.33.1"
    # no _version.py: falls back to dist-info METADATA, then to the file name
    bare = tmp_path / "vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(bare, "w") as z:
        z.writestr("vllm/__init__.py", "")
    assert compat.WheelSource(bare).version() == "0.32.0"
    assert compat.minor_of("0.33.0") == "0.33"
    assert compat.minor_of("0.32.0+cpu") == "0.32"
    assert compat.minor_of("0.33.0rc1") == "0.33"
    with pytest.raises(ValueError):
        compat.minor_of("main")


def test_dir_source_like_installed_package(tmp_path):
    pkg = tmp_path / "site" / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (pkg / "_version.py").write_text(VERSION_PY.replace("0.33.1", "0.32.0").replace("33, 1", "32, 0"))
    (pkg / "engine" / "arg_utils.py").write_text(ARG_UTILS)
    src = compat.DirSource(tmp_path / "site")
    assert src.version() == "0.32.0"
    row = _one(T("EngineArgs.create_speculative_config", ("self", "target_model_config")), src, "0.32")
    assert row.status == compat.OK


def test_run_table_and_exit_codes(fake_wheel, capsys):
    src = compat.WheelSource(fake_wheel)
    good = (T("EngineArgs.create_speculative_config", ("self", "target_model_config"), why="good one"),)
    assert compat.run(src, src.version(), good) == 0
    out = capsys.readouterr().out
    assert fake_wheel.name in out and "0.33.1" in out and "0.33" in out
    assert re.search(r"^OK\s+vllm\.engine\.arg_utils\s+EngineArgs\.create_speculative_config", out, re.M)
    assert "good one" in out and "result: PASS" in out

    assert "patches applied on 0.33: 0 (none)" in out
    assert re.search(r"^version summary: vLLM 0\.33\.1 \(.*\): PASS: 1 OK; 0 patches applied on 0\.33", out, re.M)

    patched = good + (T("top_level", patch=7, why="patched"), T("gone_in_033", patch=3, versions=("0.32",)))
    assert compat.run(src, src.version(), patched) == 0
    assert "patches applied on 0.33: 1 (7)" in capsys.readouterr().out

    bad = good + (T("EngineArgs.create_speculative_config", ("self", "renamed"), why="bad one"),
                  T("EngineArgs.gone", why="missing one"))
    assert compat.run(src, src.version(), bad) == 1
    out = capsys.readouterr().out
    assert re.search(r"^SIGNATURE\s", out, re.M) and re.search(r"^MISSING\s", out, re.M)
    assert "result: FAIL" in out


def test_main_with_wheel_never_imports_vllm(fake_wheel, capsys):
    # Against the real manifest the fake wheel lacks nearly everything -> exit 1,
    # and the fake vllm/__init__.py (which raises) is never executed.
    rc = compat.main(["--wheel", str(fake_wheel)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "vllm-0.33.1-cp38-abi3-manylinux_2_28_x86_64.whl" in out
    assert "vLLM version: 0.33.1" in out


def test_main_checks_several_versions_in_one_run(fake_wheel, tmp_path, capsys, monkeypatch):
    other = tmp_path / "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(fake_wheel) as src, zipfile.ZipFile(other, "w") as dst:
        for name in src.namelist():
            text = src.read(name).decode()
            dst.writestr(name, text.replace("0.33.1", "0.34.0").replace("33, 1", "34, 0"))
    targets = (T("EngineArgs.create_speculative_config", ("self", "target_model_config"), patch=1,
                 versions=("0.32", "0.33", "0.34")),
               T("EngineArgs.async_method", patch=2, versions=("0.32", "0.33")))
    monkeypatch.setattr(compat, "load_targets", lambda path=None: targets)
    assert compat.main(["--wheel", str(fake_wheel), "--wheel", str(other)]) == 0
    out = capsys.readouterr().out
    assert "vLLM version: 0.33.1 (checking targets for 0.33)" in out
    assert "vLLM version: 0.34.0 (checking targets for 0.34)" in out
    block = out[out.index("summary by vLLM version:"):]
    assert re.search(r"vLLM 0\.33\.1 \(vllm-0\.33\.1-.*\): PASS: 2 OK; 2 patches applied on 0\.33 \(1-2\)", block)
    assert re.search(r"vLLM 0\.34\.0 \(vllm-0\.34\.0-.*\): PASS: 1 OK, 1 INFO; 1 patch applied on 0\.34 \(1\)",
                     block)
    assert block.rstrip().endswith("result: PASS")

    # one source missing: the others are still checked, and the run exits 2
    assert compat.main(["--wheel", str(fake_wheel), "--wheel", str(tmp_path / "nope.whl")]) == 2
    out = capsys.readouterr().out
    assert "vLLM version: 0.33.1" in out and "ERROR" in out[out.index("summary by vLLM version:"):]


def test_exit_code_of_several_versions():
    R = compat.Result
    assert compat.exit_code([R("a", "0.32.0"), R("b", "0.33.0")]) == 0
    assert compat.exit_code([R("a", "0.32.0", code=1), R("b", "0.33.0")]) == 1
    assert compat.exit_code([R("a", "0.32.0", code=1), R("b", None, code=2)]) == 2
    assert compat.exit_code([]) == 0


def test_cached_wheel_is_reused_without_pip(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = cache / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    (cache / "vllm-0.33.10-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")

    def no_pip(*a, **k):  # pragma: no cover - would mean a network call
        raise AssertionError("pip must not run when the wheel is cached")

    monkeypatch.setattr(compat._WHEELS.subprocess, "run", no_pip)
    assert compat.download_wheel("0.33.0", cache) == wheel
    assert compat.find_cached_wheel("0.33.1", cache) is None


def test_download_failure_is_reported(tmp_path, monkeypatch):
    calls = []

    class Done:
        returncode = 1
        stdout = ""
        stderr = "ERROR: No matching distribution found for vllm==9.9.9"

    def fake_run(cmd, env=None, **kw):
        calls.append((cmd, env.get("PIP_CONSTRAINT") if env else None))
        return Done()

    monkeypatch.setattr(compat._WHEELS.subprocess, "run", fake_run)
    with pytest.raises(LookupError, match="No matching distribution"):
        compat.download_wheel("9.9.9", tmp_path / "c")
    assert calls and all("--no-deps" in c[0] and "vllm==9.9.9" in c[0] for c in calls)
    assert len(calls) == len(compat.DOWNLOAD_COMBOS)  # no constraint retry: not a constraint error


def test_constraint_complaint_retries_with_empty_pip_constraint(tmp_path, monkeypatch):
    cache = tmp_path / "c"
    envs = []

    class Done:
        def __init__(self, rc, err):
            self.returncode, self.stdout, self.stderr = rc, "", err

    def fake_run(cmd, env=None, **kw):
        envs.append(env.get("PIP_CONSTRAINT"))
        if env.get("PIP_CONSTRAINT") == "":
            (cache / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl").write_bytes(b"")
            return Done(0, "")
        return Done(1, "ERROR: Cannot install vllm==0.33.0 because of a constraint")

    monkeypatch.setattr(compat._WHEELS.subprocess, "run", fake_run)
    got = compat.download_wheel("0.33.0", cache, log=io.StringIO())
    assert got.name.startswith("vllm-0.33.0-") and envs[-1] == ""


def test_cli_help_runs_standalone():
    import subprocess

    proc = subprocess.run([sys.executable, str(COMPAT_PATH), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "--vllm-version" in proc.stdout and "--installed" in proc.stdout and "--wheel" in proc.stdout


# ------------------------------------------------------------------ manifest


def test_manifest_targets_are_well_formed():
    manifest = compat.load_targets_module()
    targets = manifest.TARGETS
    assert targets, "manifest is empty"
    seen = set()
    for t in targets:
        assert t.why.strip(), f"{t.module}:{t.qualname} has no why"
        assert "\n" not in t.why
        assert t.kind in ("function", "class", "attribute"), t
        assert t.kind in manifest.KINDS
        assert t.module.startswith("vllm") and t.qualname, t
        assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in t.qualname.split(".")), t
        assert isinstance(t.params, tuple) and all(isinstance(p, str) and p for p in t.params), t
        if t.kind != "function":
            assert t.params == (), f"{t.qualname}: params only make sense for functions"
        assert t.versions and all(re.fullmatch(r"\d+\.\d+", v) for v in t.versions), t
        assert set(t.versions) <= set(manifest.SUPPORTED), f"{t.qualname}: {t.versions} not all supported"
        assert t.patch is None or (isinstance(t.patch, int) and 1 <= t.patch), t
        if t.patch is not None:
            assert t.kind != "class", f"{t.qualname}: a patch wraps a function or rebinds a name, not a class"
            assert f"patch {t.patch}" in t.why, f"{t.qualname}: why should name patch {t.patch}"
        for v in t.versions:  # one signature per symbol and version
            key = (t.module, t.qualname, v)
            assert key not in seen, f"duplicate target {key}"
            seen.add(key)


def test_manifest_supports_the_package_versions():
    """SUPPORTED in the manifest is _names.SUPPORTED_VLLM (both stdlib only, loaded by path)."""
    manifest = compat.load_targets_module()
    names = _load("_vsp_names_under_test", REPO / "vllm_spec_plugins" / "_names.py")
    assert manifest.SUPPORTED == tuple(f"{a}.{b}" for a, b in names.SUPPORTED_VLLM)


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_manifest_against_the_cached_wheels(version, capsys):
    """The real manifest against the real wheel, where ``make compat`` left it in the cache (offline: never
    downloaded here)."""
    wheel = compat.find_cached_wheel(version, compat.DEFAULT_CACHE) if compat.DEFAULT_CACHE.is_dir() else None
    if wheel is None:
        pytest.skip(f"no cached vllm-{version} wheel in {compat.DEFAULT_CACHE} (make compat fetches it)")
    src = compat.WheelSource(wheel)
    try:
        result = compat.check_source(src, src.version())
    finally:
        src.close()
    out = capsys.readouterr().out
    assert result.code == 0, "\n".join(line for line in out.splitlines() if line.startswith(("MISSING", "SIGN", "ERR")))


def test_manifest_is_stdlib_only():
    tree = ast.parse(TARGETS_PATH.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        for m in mods:
            top = m.split(".")[0]
            assert top == "__future__" or top in sys.stdlib_module_names, f"non-stdlib import {m}"
