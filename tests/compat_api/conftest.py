"""The compatibility suite: plugins written against older API versions, checked as their era's docs showed.

One small plugin per API version (``tests/plugins/compat_api1`` to ``compat_api3``, installed for the session
like every test plugin, tests/conftest.py), each tested the way its era's docs told authors to test theirs,
against the current release with **default settings**: the adaptive drafting policy and prompt lookup on, no
``VLLM_SPEC_PLUGINS_*`` variable set but the trace folder. The prompts repeat themselves so that prompt lookup
fires, and every engine test asserts that some drafts returned to vLLM are not the model's (the checks would pass
vacuously otherwise). What the suite stands for: docs/releasing.md, "What plugin authors can rely on".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: Repetitive prompts (tiny byte-level target ids): prompt lookup finds n-gram matches from the first step. No two
#: share a prefix block, so the prefix cache serves nothing (the API-2 plugin folds every scheduled token).
PROMPTS = [
    [1, 40, 41, 42, 43, 40, 41, 42, 43, 40, 41],
    [1, 90, 91, 90, 91, 90, 91, 90],
    [1, 120, 13, 77, 120, 13, 77, 120, 13],
    [1, 200, 201, 202, 203, 204, 200, 201, 202],
]
MAX_TOKENS = 64
K = 3


def defaults() -> dict[str, str | None]:
    """The engines' environment: every setting of this package at its default (a ``VLLM_SPEC_PLUGINS*`` variable
    of the calling shell removed; the test kit's own ``VLLM_SPEC_PLUGINS_TEST_*`` kept)."""
    return {name: None for name in os.environ
            if name.startswith("VLLM_SPEC_PLUGINS") and not name.startswith("VLLM_SPEC_PLUGINS_TEST")}

#: the line the runtime logs where prompt lookup runs by default (runtime/core.py)
LOOKUP_ON = "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP=auto (the default): prompt-lookup drafts"


@pytest.fixture(scope="session")
def compat_target(tmp_path_factory) -> Path:
    from vllm_spec_plugins.testing.fixtures import make_tiny_target

    return make_tiny_target(tmp_path_factory.mktemp("compat") / "target")


@pytest.fixture(scope="session")
def compat_baseline(compat_target):
    """Greedy output without speculation."""
    from vllm_spec_plugins.testing.engine import run_engine

    return run_engine(compat_target, prompts=PROMPTS, max_tokens=MAX_TOKENS, env=defaults())


def run_with_defaults(target: Path, draft: Path, trace: Path):
    """The plugin's draft on ``target`` as a user runs it (every setting at its default), traced to ``trace``."""
    from vllm_spec_plugins.testing.engine import run_engine

    return run_engine(target, speculative_config={"model": str(draft), "num_speculative_tokens": K}, prompts=PROMPTS,
                      max_tokens=MAX_TOKENS, env={**defaults(), "VLLM_SPEC_PLUGINS_TRACE_DIR": str(trace)})


def lookup_replaced_model_drafts(records) -> int:
    """Rows whose drafts returned to vLLM differ from the model's where the model drafted (prompt lookup's in their
    place): the suite's checks of ``drafts`` are not vacuous where this is above 0. Read from the current schema's
    ``returned_drafts``, after the era's checks, which read only what their docs named."""
    n = 0
    for rec in records:
        model, returned = rec["drafts"], rec["returned_drafts"]
        mk = model.shape[1]
        if mk:
            n += int((returned[:, :mk] != model).any(dim=1).sum())
    return n
