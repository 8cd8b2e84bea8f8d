"""Test kit for plugin authors (docs/testing-plugins.md).

* :mod:`.fixtures`: tiny deterministic checkpoints (target, Medusa, EAGLE-1, EAGLE-3), no download;
* :mod:`.harness`: a heads drafter in process on CPU, driven with fake batches (no engine);
* :mod:`.engine`: ``run_engine``, a real vLLM engine in a fresh process;
* :mod:`.conformance`: ``ConformanceSuite``, the tests every plugin should pass, on real engines.
"""

from typing import Any


def __getattr__(name: str) -> Any:  # lazy: `python -m vllm_spec_plugins.testing.engine` must not import itself twice
    if name in ("EngineResult", "run_engine"):
        from . import engine

        return getattr(engine, name)
    if name in ("make_tiny_medusa", "make_tiny_target"):
        from . import fixtures

        return getattr(fixtures, name)
    raise AttributeError(name)


__all__ = ["EngineResult", "make_tiny_medusa", "make_tiny_target", "run_engine"]
