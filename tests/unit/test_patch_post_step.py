"""Patch 25: the engine core skips taking drafts from the runner after a step that drafted nothing.

Stand-ins for vLLM's ``EngineCore`` (its ``post_step``, as patched) and scheduler: the original is skipped only where
the plugin drafter's policy chose ``k = 0`` for the step just run, on the V1 runner, with synchronous scheduling and
no batch queue; every other case calls vLLM's ``post_step`` (each case below fails with its condition removed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_spec_plugins.patch import scheduler as S
from vllm_spec_plugins.policy import AdaptivePolicy, PolicySettings


class Core:
    def __init__(self, k: int | None = 0, v2: bool = False, async_scheduling: bool = False, batch_queue=None,
                 config_raises: bool = False) -> None:
        self.scheduler = SimpleNamespace()
        if k is not None:
            policy = AdaptivePolicy(3, PolicySettings(mode="pinned", pin=k))
            policy.decide(8)  # the step just run was scheduled at this k
            setattr(self.scheduler, S.ATTR, policy)
        self.async_scheduling = async_scheduling
        self.batch_queue = batch_queue

        class Config:
            @property
            def use_v2_model_runner(self_) -> bool:
                if config_raises:
                    raise RuntimeError("no runner known")
                return v2

        self.vllm_config = Config()
        self.taken = 0

    def post_step(self, model_executed: bool) -> None:  # vLLM's: takes the drafts (an RPC to the worker)
        self.taken += 1


post_step = S._post_step_wrap(Core.post_step)


def test_a_step_at_k0_on_v1_takes_no_drafts():
    core = Core(k=0)
    for _ in range(3):
        post_step(core, True)
    assert core.taken == 0
    assert S.policy_of(core.scheduler).draft_takes_skipped == 3
    assert S.policy_of(core.scheduler).summary()["draft_takes_skipped"] == 3


@pytest.mark.parametrize("case", [
    dict(k=1),                       # the step drafted
    dict(k=None),                    # no plugin drafter's policy (vLLM's own drafters, policy off)
    dict(v2=True),                   # MRV2 hands -1 placeholders of the drafts' width
    dict(async_scheduling=True),     # vLLM's own post_step decides (it takes nothing there)
    dict(batch_queue=[]),            # with a batch queue the policy's k may be a later step's
    dict(config_raises=True),        # runner unknown: take, as vLLM does
])
def test_every_other_step_takes_vllms_path(case):
    core = Core(**case)
    post_step(core, True)
    assert core.taken == 1
    policy = S.policy_of(core.scheduler)
    assert policy is None or policy.draft_takes_skipped == 0


def test_a_step_that_ran_no_model_goes_to_vllm():
    core = Core(k=0)
    post_step(core, False)
    assert core.taken == 1  # vLLM's post_step does nothing then; the patch does not stand in its way


def test_the_runner_is_read_once():
    core = Core(k=0)
    post_step(core, True)
    core.vllm_config = None  # read again, this would fail and take
    post_step(core, True)
    assert core.taken == 0
