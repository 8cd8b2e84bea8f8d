"""Test kit for plugin authors: tiny checkpoints, a real-engine runner and pytest fixtures.

Enable the fixtures with ``pytest_plugins = ["vllm_spec_plugins.testing.pytest_plugin"]``.
"""



def __getattr__(name):  # lazy: `python -m vllm_spec_plugins.testing.engine` must not import itself twice
    if name in ("EngineResult", "run_engine"):
        from . import engine

        return getattr(engine, name)
    if name in ("make_tiny_medusa", "make_tiny_target"):
        from . import fixtures

        return getattr(fixtures, name)
    raise AttributeError(name)


__all__ = ["EngineResult", "make_tiny_medusa", "make_tiny_target", "run_engine"]
