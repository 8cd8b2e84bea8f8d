"""Scheduler patches (engine-core process): the adaptive drafting policy. See :mod:`vllm_spec_plugins.patch`.

vLLM 0.32's scheduler already varies the number of draft tokens per step: when
``num_speculative_tokens_per_batch_size`` is set it reads ``k`` from a dense
batch-size -> k list (``Scheduler.dynamic_sd_lookup``) once per step and puts it in
``SchedulerOutput.num_spec_tokens_to_schedule``; the model runner passes it to the
drafter, and the async scheduler sizes its draft placeholders from it. For a plugin
draft without such a schedule, the policy takes that list's place: ``lookup[b]`` asks
:class:`~vllm_spec_plugins.policy.AdaptivePolicy` instead. Everything runs on the host,
in the scheduler, with data vLLM already has there: no device work, no synchronisation,
one decision for every tensor-parallel rank.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any

from .._compat import has_speculator_registry
from .._names import MODEL_K_ATTR, SOURCES_ATTR
from ..policy import ENV_STATS, AdaptivePolicy, PolicySettings, StepShape
from ..routing import plugin_of
from ._util import when_imported, wrap_method

logger = logging.getLogger("vllm.spec_plugins")

MODULE = "vllm.v1.core.sched.scheduler"
CORE_MODULE = "vllm.v1.engine.core"
ATTR = "_vsp_policy"
#: on an ``EngineCore``: whether its model runner is V1 (read once, from ``VllmConfig.use_v2_model_runner``)
V1_ATTR = "_vsp_v1_runner"


class PolicyLookup:
    """Stands in for vLLM's dense ``batch size -> k`` list: each lookup is one policy decision."""

    def __init__(self, policy: AdaptivePolicy) -> None:
        self.policy = policy

    def __getitem__(self, batch_size: int) -> int:
        return self.policy.decide(int(batch_size))


def policy_of(scheduler: Any) -> AdaptivePolicy | None:
    return getattr(scheduler, ATTR, None)


def attach(scheduler: Any, vllm_config: Any, environ: dict[str, str] | None = None) -> AdaptivePolicy | None:
    """Give a scheduler serving a plugin draft the adaptive policy, unless something else decides ``k``."""
    import os

    env = os.environ if environ is None else environ
    spec: Any = getattr(vllm_config, "speculative_config", None)  # vLLM's SpeculativeConfig (None: no drafts)
    name = plugin_of(spec)
    if not name:
        return None
    k = int(spec.num_speculative_tokens or 0)
    settings = PolicySettings.from_env(env)
    if getattr(spec, "num_speculative_tokens_per_batch_size", None):
        logger.info("vllm_spec_plugins: num_speculative_tokens_per_batch_size is set, so vLLM's static schedule "
                    "decides the draft tokens per step; the adaptive drafting policy is off")
        return None
    if k < 1:
        return None
    dp = getattr(vllm_config.parallel_config, "data_parallel_size", 1) or 1
    if dp > 1 and settings.mode != "off":
        logger.info("vllm_spec_plugins: data parallel size %d: the adaptive drafting policy is off (ranks could "
                    "choose different k); every step drafts k=%d", dp, k)
        return None
    if settings.mode == "off":
        logger.info("vllm_spec_plugins: adaptive drafting policy off (%s=off): every step drafts k=%d",
                    "VLLM_SPEC_PLUGINS_POLICY", k)
        return None
    if getattr(scheduler, "dynamic_sd_lookup", None) is not None:
        return None
    policy = AdaptivePolicy(k, settings, log=logger.info, stats_path=env.get(ENV_STATS) or None)
    scheduler.dynamic_sd_lookup = PolicyLookup(policy)
    setattr(scheduler, ATTR, policy)
    if settings.mode == "pinned":
        logger.info("vllm_spec_plugins: draft tokens pinned to k=%d per step (VLLM_SPEC_PLUGINS_POLICY)",
                    settings.pin)
    else:
        logger.info("vllm_spec_plugins: adaptive drafting policy on for plugin %r: each step verifies k in 0..%d "
                    "draft tokens, whichever is measured to give the most tokens/s (VLLM_SPEC_PLUGINS_POLICY=off: "
                    "always k=%d)", name, k, k)
    return policy


def step_shape(scheduler_output: Any) -> StepShape:
    """What :meth:`AdaptivePolicy.end_step` needs to know about a finished step."""
    num = scheduler_output.num_scheduled_tokens
    spec = scheduler_output.scheduled_spec_decode_tokens or {}
    pure = not scheduler_output.scheduled_new_reqs and all(n == 1 + len(spec.get(r, ())) for r, n in num.items())
    return StepShape(b=len(num), k_drafted=int(scheduler_output.num_spec_tokens_to_schedule or 0),
                     k_verified=max((len(v) for v in spec.values()), default=0), pure_decode=pure,
                     n_verified=sum(len(v) for v in spec.values()))


def _init_wrap(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        original(self, vllm_config, *args, **kwargs)
        try:
            attach(self, vllm_config)
        except Exception:  # the policy must never stop a scheduler
            logger.exception("vllm_spec_plugins: the adaptive drafting policy failed to start; every step drafts "
                             "num_speculative_tokens")

    return __init__


def _schedule_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        policy = policy_of(self)
        if policy is not None:
            t = perf_counter()
            policy.begin_step()
            if policy.k > 0:
                for req in self.running:
                    drafts = req.spec_token_ids
                    if drafts:
                        k = policy.request_width(req.request_id, len(drafts))
                        if k < len(drafts):
                            req.spec_token_ids = drafts[:k]  # a new list: async placeholders are shared
            policy.host_seconds += perf_counter() - t
        out = original(self, *args, **kwargs)
        if policy is not None and policy.k_model < policy.k == getattr(out, "num_spec_tokens_to_schedule", None):
            setattr(out, MODEL_K_ATTR, policy.k_model)  # raised for lookup's drafts: the model drafts fewer
        return out

    return schedule


def _stats_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def make_spec_decoding_stats(self: Any, spec_decoding_stats: Any, num_draft_tokens: int, num_accepted_tokens: int,
                                 num_invalid_spec_tokens: dict[str, int] | None, request_id: str) -> Any:
        policy = policy_of(self)
        if policy is not None:
            t = perf_counter()
            invalid = (num_invalid_spec_tokens or {}).get(request_id, 0)
            policy.observe_request(request_id, num_draft_tokens - invalid, num_accepted_tokens)
            policy.host_seconds += perf_counter() - t
        return original(self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens,
                        request_id)

    return make_spec_decoding_stats


def _update_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        policy = policy_of(self)
        if policy is None:
            return original(self, scheduler_output, model_runner_output)
        t = perf_counter()
        shape = step_shape(scheduler_output)
        host = perf_counter() - t
        out = original(self, scheduler_output, model_runner_output)
        t = perf_counter()
        policy.end_step(**shape._asdict())
        if policy.stats_path and not self.running and not self.waiting:
            policy.write_stats()  # idle: the engine may be shut down before its scheduler is
        policy.host_seconds += host + perf_counter() - t
        return out

    return update_from_output


def _drafts_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def update_draft_token_ids(self: Any, draft_token_ids: Any) -> Any:
        policy = policy_of(self)
        if policy is not None:
            t = perf_counter()
            policy.note_sources(draft_token_ids.req_ids, getattr(draft_token_ids, SOURCES_ATTR, None))
            policy.host_seconds += perf_counter() - t
        return original(self, draft_token_ids)

    return update_draft_token_ids


def _shutdown_wrap(original: Callable[..., None]) -> Callable[..., None]:
    def shutdown(self: Any) -> None:
        policy = policy_of(self)
        if policy is not None and policy.step:
            logger.info("%s", policy.summary_line())
            policy.write_stats()
        return original(self)

    return shutdown


def drafted_nothing(core: Any) -> bool:
    """Whether the step the engine core just ran drafted no token for the scheduler: its plugin drafter's policy
    chose ``k = 0`` for it (lookup's drafts included), on the V1 runner, without a batch queue.

    The V1 runner then hands the scheduler an empty list per request (``[B, 0]`` drafts), and the scheduler already
    emptied every scheduled request's ``spec_token_ids`` when it scheduled the step: taking them changes nothing."""
    policy = policy_of(getattr(core, "scheduler", None))
    if policy is None or policy.k != 0 or getattr(core, "batch_queue", None) is not None:
        return False
    v1 = getattr(core, V1_ATTR, None)
    if v1 is None:
        try:
            v1 = not core.vllm_config.use_v2_model_runner
        except Exception:  # noqa: BLE001 - unknown: take the drafts, as vLLM does
            v1 = False
        setattr(core, V1_ATTR, v1)
    return v1


def _post_step_wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def post_step(self: Any, model_executed: bool) -> Any:
        if model_executed and not getattr(self, "async_scheduling", True) and drafted_nothing(self):
            policy = policy_of(self.scheduler)
            policy.draft_takes_skipped += 1  # type: ignore[union-attr]  # drafted_nothing: not None
            return None
        return original(self, model_executed)

    return post_step


def patch_core(mod: Any) -> None:
    wrap_method(mod.EngineCore, "post_step", _post_step_wrap)


def patch_module(mod: Any) -> None:
    cls = mod.Scheduler
    wrap_method(cls, "__init__", _init_wrap)
    wrap_method(cls, "schedule", _schedule_wrap)
    wrap_method(cls, "make_spec_decoding_stats", _stats_wrap)
    wrap_method(cls, "update_from_output", _update_wrap)
    wrap_method(cls, "update_draft_token_ids", _drafts_wrap)
    wrap_method(cls, "shutdown", _shutdown_wrap)


def apply_when_imported() -> None:
    """Patch vLLM's V1 ``Scheduler`` and ``EngineCore`` when the engine core imports them."""
    when_imported(MODULE, patch_module)
    if not has_speculator_registry():  # only the V1 runner's k = 0 drafts are empty; 0.34 has no V1 runner
        when_imported(CORE_MODULE, patch_core)
