"""Import edges run one way: patch/ and testing/ build on the core, never the reverse.

User commands (``check``, ``doctor``, ``list``...) and the rules they share with the engine
(routing, checkpoint reading, explanations) must not import the patch layer or the test kit;
``shim`` is the one module that installs the patches.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "vllm_spec_plugins"
#: Modules allowed to import ``vllm_spec_plugins.patch``: the entry point that installs the patches.
MAY_IMPORT_PATCH = {"vllm_spec_plugins.shim"}
#: The patch manifest is stdlib-only data (``make compat`` reads it from vLLM's source); ``doctor`` checks
#: it against the imported vLLM. Reading it imports no wrapper.
MANIFEST = "vllm_spec_plugins.patch.targets"
#: ``python -m vllm_spec_plugins.demo`` shows the tiny test fixtures at work: the test kit is what it demonstrates.
MAY_IMPORT_TESTING = {"vllm_spec_plugins.demo"}


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` imports (function-level imports included), relative ones resolved."""
    out: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}
    return out


def core_modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[1:2] in (["patch"], ["testing"]):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    bad = []
    for name in sorted(imports_of(source, module, is_package)):
        if name.startswith("vllm_spec_plugins.testing") and module not in MAY_IMPORT_TESTING:
            bad.append(f"{module} imports the test kit ({name})")
        elif name.startswith(MANIFEST):
            continue
        elif name.startswith("vllm_spec_plugins.patch") and module not in MAY_IMPORT_PATCH:
            bad.append(f"{module} imports the patch layer ({name})")
    return bad


def test_the_core_imports_neither_the_patch_layer_nor_the_test_kit():
    mods = core_modules()
    assert {"vllm_spec_plugins.diagnose", "vllm_spec_plugins.cli", "vllm_spec_plugins.routing",
            "vllm_spec_plugins.checkpoint", "vllm_spec_plugins.explain"} <= set(mods)
    bad = [v for m, p in mods.items() for v in violations(m, p.read_text(), p.name == "__init__.py")]
    assert not bad, "\n".join(bad)


def test_the_patch_layer_does_not_import_the_shim():
    """Version helpers come from ``_compat``; the shim installs the patches, not the other way round."""
    bad = []
    for path in (PKG / "patch").glob("*.py"):
        mod = f"vllm_spec_plugins.patch.{path.stem}"
        bad += [f"{mod} imports {n}" for n in imports_of(path.read_text(), mod, path.stem == "__init__")
                if n.startswith("vllm_spec_plugins.shim")]
    assert not bad, "\n".join(bad)


def test_a_backward_edge_is_caught():
    """What an earlier diagnose.py did (``from .testing.harness import engine_config`` inside a function)."""
    src = "def f():\n    from .testing.harness import engine_config\n    from .patch.config import route_request\n"
    assert violations("vllm_spec_plugins.diagnose", src) == [
        "vllm_spec_plugins.diagnose imports the patch layer (vllm_spec_plugins.patch.config)",
        "vllm_spec_plugins.diagnose imports the patch layer (vllm_spec_plugins.patch.config.route_request)",
        "vllm_spec_plugins.diagnose imports the test kit (vllm_spec_plugins.testing.harness)",
        "vllm_spec_plugins.diagnose imports the test kit (vllm_spec_plugins.testing.harness.engine_config)"]
    assert imports_of("from ..checkpoint import x", "vllm_spec_plugins.runtime.core") >= {"vllm_spec_plugins.checkpoint"}
