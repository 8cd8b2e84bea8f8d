"""vLLM's engine start in this process, without an engine: its config, its CPU runtime, its models.

What ``vllm-spec-plugins check --target`` runs (the engine config with the shim's config
patch, the draft loaded through vLLM's loader, the heads proposer's start-up trial), and
what the test kit's :class:`~vllm_spec_plugins.testing.harness.DrafterHarness` drives step by
step. vLLM is imported inside the functions.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from ._compat import has_speculator_registry

_DIST_READY = False


def engine_config(target: Any, draft: Any = None, *, num_speculative_tokens: int | None = 3,
                  method: str | None = None, dtype: str = "float32", max_model_len: int = 512,
                  max_num_seqs: int = 8, speculative_config: dict[str, Any] | None = None,
                  **engine_kwargs: Any) -> Any:
    """vLLM's ``VllmConfig`` for ``LLM(target, speculative_config={"model": draft, ...})``, built in this process.

    The runner shim is registered first, so the draft goes through the same config patch as
    in an engine start (plugin selection, the plugin's config class, sizes from the target,
    the ``num_speculative_tokens`` limit). Raises what the engine start would raise.
    """
    from vllm.engine.arg_utils import EngineArgs

    from .shim import register

    register()
    spec = dict(speculative_config or {})
    if draft is not None:
        spec.setdefault("model", str(draft))
        spec.setdefault("num_speculative_tokens", num_speculative_tokens)
        if method:
            spec.setdefault("method", method)
    args = EngineArgs(model=str(target), speculative_config=spec or None, dtype=dtype, max_model_len=max_model_len,
                      max_num_seqs=max_num_seqs, enforce_eager=True, skip_tokenizer_init=True, seed=0,
                      **engine_kwargs)
    # vLLM's CPU platform adds PyTorch's libgomp to os.environ["LD_PRELOAD"] while it builds the config (for
    # the engine processes it would spawn). In this process that only leaks into later subprocesses (a test
    # session's engines, which may preload Intel OpenMP: vLLM then refuses both), so it is put back.
    preload = os.environ.get("LD_PRELOAD")
    try:
        return args.create_engine_config()
    finally:
        if preload is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = preload


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # (host, port) of an AF_INET socket
        return port


def init_cpu_runtime(vllm_config: Any) -> None:
    """vLLM's distributed and model-parallel state for one rank (gloo), once per process.

    What a vLLM worker sets up before it builds models; vLLM's parallel layers
    (``ParallelLMHead``, ``ColumnParallelLinear``...) need it.
    """
    global _DIST_READY
    if _DIST_READY:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        # What vLLM's CPU worker does first: torch.accelerator calls of shared code become no-ops.
        if has_speculator_registry():  # vLLM 0.34: its CPU worker imports MRV2's CPU patches of torch (the V1 runner is gone)
            import vllm.v1.worker.cpu.shm  # noqa: F401
        else:
            from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

            _set_torch_accelerator_to_noop()
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"tcp://127.0.0.1:{_free_port()}", backend="gloo")
        ensure_model_parallel_initialized(1, 1)
    _DIST_READY = True


def build_target_model(vllm_config: Any) -> Any:
    """The target model, built and loaded by vLLM's loader on this process's device."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model

    init_cpu_runtime(vllm_config)
    with set_current_vllm_config(vllm_config):
        return get_model(vllm_config=vllm_config)


def build_draft_model(vllm_config: Any) -> Any:
    """The draft model alone, built and loaded by vLLM's loader as the proposer does.

    vLLM's loader calls the model's ``load_weights`` and fails when a parameter was not
    loaded; ``process_weights_after_loading`` runs as in a worker. ``bind_target`` is not
    called (see :class:`DrafterHarness`).
    """
    from dataclasses import replace

    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model

    spec = vllm_config.speculative_config
    draft_config = replace(vllm_config, quant_config=None, model_config=spec.draft_model_config)
    init_cpu_runtime(vllm_config)
    with set_current_vllm_config(draft_config):
        return get_model(vllm_config=draft_config, prefix="draft_model")


@dataclass
class StartedProposer:
    """What :func:`start_heads_proposer` built (``proposer``: the V1 ``HeadsProposer``, or on vLLM 0.34 MRV2's
    :class:`~vllm_spec_plugins.runtime.mrv2.PluginHeadsSpeculator`)."""

    vllm_config: Any
    drafter: Any
    device: Any
    proposer: Any
    target_model: Any


def start_heads_proposer(target: Any, draft: Any, *, num_speculative_tokens: int = 3, method: str | None = None,
                         load_target: bool | None = None, **engine_kwargs: Any) -> StartedProposer:
    """The shim's heads proposer as an engine start builds it, on CPU: the engine config, the draft through
    vLLM's loader, ``bind_target`` (the target is built when the model class has one, or ``load_target``),
    and the start-up trial its ``load_model`` runs. Raises what the engine start would raise.

    On vLLM 0.34 (Model Runner V2 only) the drafter is the speculator 0.34's registry builds for heads plugins,
    :class:`~vllm_spec_plugins.runtime.mrv2.PluginHeadsSpeculator`, whose ``load_model`` loads the draft and runs
    the same trial (it has no V1 proposer step API: :class:`DrafterHarness` needs vLLM 0.32 or 0.33)."""
    import torch
    from vllm.config import set_current_vllm_config

    from .runtime.core import drafter_for

    vllm_config = engine_config(target, draft, num_speculative_tokens=num_speculative_tokens, method=method,
                                **engine_kwargs)
    drafter = drafter_for(vllm_config)
    if drafter.kind != "heads":
        raise ValueError(f"DrafterHarness runs heads drafters; plugin {drafter.plugin!r} registers "
                         f"{drafter.architectures} as kind {drafter.kind!r}: test it with run_engine")
    device = torch.device("cpu")
    init_cpu_runtime(vllm_config)
    with set_current_vllm_config(vllm_config):
        if has_speculator_registry():  # vLLM 0.34: Model Runner V2 only
            from .runtime.mrv2 import PluginHeadsSpeculator

            proposer: Any = PluginHeadsSpeculator(vllm_config, device, None, drafter=drafter)
        else:
            from .runtime.proposer import HeadsProposer

            proposer = HeadsProposer(vllm_config, device, None, drafter=drafter)
        if load_target is None:
            load_target = hasattr(proposer.model_cls, "bind_target")
        target_model = build_target_model(vllm_config) if load_target else None
        proposer.load_model(target_model)
    return StartedProposer(vllm_config, drafter, device, proposer, target_model)
