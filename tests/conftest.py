"""Shared fixtures: tiny checkpoints built once per session, plugin fixtures installed as distributions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The vLLM 0.34 test environment lives in this repository's .cache (make setup builds it there).
os.environ.setdefault("VLLM_SPEC_PLUGINS_TEST_CACHE", str(ROOT / ".cache"))

#: Several prompts of different lengths (token ids of the byte-level tiny target).
PROMPTS = [
    [1, 50, 60, 70, 80],
    [1, 100, 101, 102],
    [1, 7, 7, 7, 7, 7, 30],
    [1, 200, 13, 45, 99, 120, 33, 81, 9, 64, 210],
    [1, 33],
    [1, 66, 67, 68, 69, 70, 71],
]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/e2e/" in str(item.fspath) or "/compat_api/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Tiny target and draft checkpoints (no download)."""
    import torch
    from safetensors.torch import save_file

    from vllm_spec_plugins.testing.fixtures import (
        make_tiny_eagle,
        make_tiny_eagle3,
        make_tiny_medusa,
        make_tiny_mlp_speculator,
        make_tiny_target,
    )

    d = tmp_path_factory.mktemp("ckpt")
    target = make_tiny_target(d / "target")
    state = d / "state"
    state.mkdir()
    (state / "config.json").write_text(json.dumps({
        "model_type": "vsp_state_test", "architectures": ["StateTestDrafter"], "hidden_size": 128,
        "vocab_size": 259, "num_heads": 4}))
    save_file({"one": torch.ones(1)}, str(state / "model.safetensors"))
    return {
        "target": target,
        "medusa": make_tiny_medusa(d / "medusa", target, num_heads=3),
        "medusa_old_bias": make_tiny_medusa(d / "medusa_old_bias", target, num_heads=3, biases=True,
                                            layout="old", fmt="pt"),
        "medusa_shared_bin": make_tiny_medusa(d / "medusa_shared_bin", target, num_heads=3, original_lm_head=True,
                                              include_lm_head=False, fmt="bin"),
        "medusa_token_map": make_tiny_medusa(d / "medusa_token_map", target, num_heads=3, truncate_vocab=160),
        # A draft vocabulary over the target's lm_head: token_map, original_lm_head and no lm_head stored.
        "medusa_vocab": make_tiny_medusa(d / "medusa_vocab", target, num_heads=3, original_lm_head=True,
                                         include_lm_head=False, truncate_vocab=160),
        "state": state,
        # "eagle-" in the folder name: vLLM's path heuristic picks method "eagle" without being told.
        "eagle": make_tiny_eagle(d / "tiny-eagle-1", target),
        "eagle_bias": make_tiny_eagle(d / "tiny-eagle-1-bias", target, fc_bias=True, fmt="bin"),
        "variant": _variant(make_tiny_eagle(d / "tiny-variant", target)),
        # EAGLE-1 with a draft vocabulary (d2t, no lm_head): the target's 128 most frequently produced tokens.
        "eagle_vocab": make_tiny_eagle(d / "tiny-eagle-1-vocab", target, draft_vocab=128),
        # "eagle3" in the folder name: vLLM's path heuristic picks method "eagle3" without being told.
        # Draft vocabulary: the target's 200 most frequently produced tokens (d2t/t2d).
        "eagle3": make_tiny_eagle3(d / "tiny-eagle3", target, draft_vocab=200),
        # The same draft vocabulary with the target's lm_head rows: stored, and not stored (d2t only).
        "eagle3_rows": make_tiny_eagle3(d / "tiny-eagle3-rows", target, draft_vocab=200, lm_head="target_rows"),
        "eagle3_no_head": make_tiny_eagle3(d / "tiny-eagle3-no-head", target, draft_vocab=200, lm_head="none"),
        # IBM fms-extras layout: untied; tied, stored once, scale_input, 'speculator.' prefix; tied at every index (.bin)
        "mlp": make_tiny_mlp_speculator(d / "mlp", target, n_predict=3),
        "mlp_tied": make_tiny_mlp_speculator(d / "mlp_tied", target, n_predict=4, tie_weights=True, scale_input=True,
                                             prefix="speculator."),
        "mlp_tied_all": make_tiny_mlp_speculator(d / "mlp_tied_all", target, n_predict=3, tie_weights=True,
                                                 tied_keys="all", fmt="bin", seed=6),
    }


def _variant(path: Path) -> Path:
    """The EAGLE checkpoint, claimed by the third-party variant plugin (tests/plugins/eagle_variant)."""
    return claim_architecture(path, "EagleVariantLlama")


def claim_architecture(path: Path, arch: str) -> Path:
    """Rewrite a checkpoint's ``architectures`` to ``[arch]`` (a test plugin claims that name)."""
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = [arch]
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


#: Test-only plugin distributions (tests/plugins/) every test engine sees. They are never installed into
#: the environment a user runs (`make setup`'s .venv): the session installs them into a temporary folder and
#: puts it on PYTHONPATH, which vLLM's engine processes inherit.
TEST_PLUGINS = ("state_drafter", "eagle_variant", "recurrent_drafter", "oracle_drafter",
                # the compatibility suite's plugins, one per API version (tests/compat_api/)
                "compat_api1", "compat_api2", "compat_api3")


_SESSION_PRELOAD = os.environ.get("LD_PRELOAD")


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves ``os.environ`` as it found it. Building a vLLM config in this process (the harness,
    ``check``, unit tests) lets vLLM's CPU platform write it: PyTorch's libgomp into ``LD_PRELOAD``,
    ``VLLM_WORKER_MULTIPROC_METHOD=spawn``... Engines started by a later test would inherit that (with Intel
    OpenMP preloaded too, vLLM refuses to start), depending on which tests ran before in the same worker.
    A module- or session-scoped fixture's config is built before this snapshot, so ``LD_PRELOAD`` is also put
    back to the value this session started with before each test."""
    if os.environ.get("LD_PRELOAD") != _SESSION_PRELOAD:
        if _SESSION_PRELOAD is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = _SESSION_PRELOAD
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session", autouse=True)
def test_plugins_site(request, tmp_path_factory):
    """Install the test-only plugins for this session: on PYTHONPATH for the engines and subprocesses the
    tests start, and on sys.path for tests that build drafters in process (the harness)."""
    import importlib

    site = tmp_path_factory.mktemp("test-plugins-site")
    _pip_install(tmp_path_factory, site, TEST_PLUGINS)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(site) + (os.pathsep + old if old else "")
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    try:
        yield str(site)
    finally:
        sys.path.remove(str(site))
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _pip_install(tmp_path_factory, target: Path, plugins: tuple[str, ...]) -> None:
    """pip-install test-only plugin distributions (tests/plugins/NAME) into ``target``.

    Each is built from a copy of its source in this worker's own temporary folder: setuptools builds in the
    source tree (``build/``, ``*.egg-info``), and the pytest-xdist workers of ``make test`` install the same
    plugins at the same time, so builds in the shared tree raced and failed at random."""
    sources = tmp_path_factory.mktemp("plugin-sources")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    copies = [shutil.copytree(ROOT / "tests" / "plugins" / name, sources / name, ignore=ignore) for name in plugins]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(target), *map(str, copies)], check=True)


def _pip_target(tmp_path_factory, plugin: str) -> str:
    """A test-only plugin distribution (tests/plugins/PLUGIN) pip-installed into a fresh folder, for PYTHONPATH."""
    target = tmp_path_factory.mktemp(f"{plugin}-site")
    _pip_install(tmp_path_factory, target, (plugin,))
    return str(target)


@pytest.fixture(scope="session")
def broken_plugin_path(tmp_path_factory) -> str:
    """A broken third-party plugin distribution, pip-installed into a folder for PYTHONPATH."""
    return _pip_target(tmp_path_factory, "broken_plugin")


@pytest.fixture(scope="session")
def mm_probe_site(tmp_path_factory) -> str:
    """The multimodal probe plugin (tests/plugins/mm_probe_drafter: a heads and an attention drafter reading the
    API-3 sources), pip-installed into a folder for PYTHONPATH."""
    return _pip_target(tmp_path_factory, "mm_probe_drafter")


@pytest.fixture(scope="session")
def exiting_plugin_path(tmp_path_factory) -> str:
    """A third-party plugin whose import calls argparse's parse_args() (SystemExit), pip-installed into a folder."""
    return _pip_target(tmp_path_factory, "exiting_plugin")


@pytest.fixture(scope="session")
def faulty_plugin_path(tmp_path_factory) -> str:
    """The faulty test plugin (tests/plugins/faulty_drafter), pip-installed into a folder for PYTHONPATH.

    It fails on purpose when its drafts are requested, and claims ``LlamaForCausalLM`` (a name
    vLLM serves): installed, it must change nothing for Llama targets or plain Llama drafts."""
    return _pip_target(tmp_path_factory, "faulty_drafter")


def with_pythonpath(path: str) -> dict[str, str]:
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path + (os.pathsep + old if old else "")}


MAX_TOKENS = 48

#: Every step drafts num_speculative_tokens, exactly as without the adaptive drafting policy: for
#: checks that compare acceptance with vLLM's built-in drafters or replay every draft.
POLICY_OFF = {"VLLM_SPEC_PLUGINS_POLICY": "off"}


@pytest.fixture(scope="session")
def baseline(tiny, broken_plugin_path, faulty_plugin_path, exiting_plugin_path):
    """Greedy output without speculation. A broken third-party plugin, one that exits at import (SystemExit
    from argparse), and one that claims the target's own architecture (LlamaForCausalLM), are installed in
    this engine's environment: plain vLLM must start anyway, with vLLM's own Llama class."""
    from vllm_spec_plugins.testing.engine import run_engine

    return run_engine(tiny["target"], prompts=PROMPTS, max_tokens=MAX_TOKENS,
                      env=with_pythonpath(os.pathsep.join([broken_plugin_path, faulty_plugin_path,
                                                           exiting_plugin_path])))


#: Lengths of the EAGLE engine tests' requests (tests/e2e/test_eagle_engine.py, test_eagle3_engine.py).
EAGLE_LENGTHS = [150, 40, 150, 100, 150, 30]


@pytest.fixture(scope="session")
def baseline_eagle_lengths(tiny):
    """Greedy output without speculation at the EAGLE tests' full lengths (up to 150 tokens), so those tests
    compare every token, not the first MAX_TOKENS."""
    from vllm_spec_plugins.testing.engine import run_engine

    return run_engine(tiny["target"], prompts=PROMPTS, max_tokens=EAGLE_LENGTHS)
